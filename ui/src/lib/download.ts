// Saving a file the browser's way (an object URL clicked as <a download>), for pages served by
// `minerva serve --ui`, where the server writes no files for the browser.

/** Hands `data` to the browser as a download named `name`. */
export function downloadFile(name: string, data: Blob): void {
  const url = URL.createObjectURL(data);
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  a.style.display = 'none';
  document.body.append(a);
  a.click();
  a.remove();
  // The click starts the download before this runs; revoking at once can cancel it in some browsers.
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

/** The bytes of a base64 string (what the PNG export builds). */
export function base64Bytes(base64: string): Uint8Array<ArrayBuffer> {
  const bin = atob(base64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}
