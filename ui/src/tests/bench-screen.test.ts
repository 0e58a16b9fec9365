// The Benchmark screen against the mock service, used like a person would: pick a model, tick
// formats (Run greys out with none), run with progress rows, cancel, read the results (verdicts,
// table with the reference marked, a chart per column), remote engines' models beside the
// formats (unticked at first, enough alone for Run, dashes and no bars for what they do not
// measure), compare two past runs, add files and import a report through the (prompt) pickers.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { render, screen, waitFor, within } from '@testing-library/svelte';
import userEvent from '@testing-library/user-event';
import BenchScreen from '../lib/components/BenchScreen.svelte';
import { BenchStore } from '../lib/stores/bench.svelte';
import { createMockTransport } from '../lib/mock';
import { recordingTransport } from './fake';

afterEach(() => vi.unstubAllGlobals());

async function setup(benchTickMs = 5, engines: string[] = []) {
  const rec = recordingTransport(createMockTransport({ benchTickMs }));
  for (const url of engines) await rec.transport.invoke('add_remote_engine', { url });
  const bench = new BenchStore(rec.transport);
  await bench.init();
  const result = render(BenchScreen, { bench });
  await screen.findByRole('option', { name: /Qwen3 0\.6B \(3 files\)/ });
  return { ...rec, bench, ...result, user: userEvent.setup() };
}

const runButton = () => screen.getByRole('button', { name: 'Run' }) as HTMLButtonElement;

describe('Benchmark screen', () => {
  it('reads a model’s formats; Run greys out with none ticked and sends the right request', async () => {
    const { user, called } = await setup();
    expect(runButton().disabled).toBe(true);
    await user.selectOptions(screen.getByLabelText('Model'), 'cat:qwen3-0.6b');
    const boxes = await screen.findAllByRole('checkbox', { name: /gguf|safetensors|mlx/ });
    expect(boxes.map((b) => (b as HTMLInputElement).checked)).toEqual([true, true, true]);
    expect(boxes[0].closest('label')?.textContent).toMatch(/gguf Q8_0\s*768 MiB/);

    for (const b of boxes) await user.click(b);
    expect(runButton().disabled).toBe(true);
    expect(screen.getByText('Tick at least one format.')).toBeTruthy();

    await user.click(screen.getByRole('checkbox', { name: /gguf Q8_0/ }));
    await user.click(screen.getByRole('checkbox', { name: /mlx 4bit/ }));
    const prompts = screen.getByLabelText(/Prompt lengths/);
    await user.clear(prompts);
    await user.type(prompts, '64, 256');
    const gen = screen.getByLabelText('Generated tokens');
    await user.clear(gen);
    await user.type(gen, '32');
    await user.selectOptions(screen.getByLabelText('Backend'), 'cpu');
    await user.click(runButton());

    expect(called('start_bench')[0].args).toEqual({
      request: {
        model: 'Qwen3 0.6B',
        paths: ['/home/me/models/Qwen3-0.6B-Q8_0.gguf', '/home/me/.cache/huggingface/hub/models--mlx-community--Qwen3-0.6B-4bit'],
        backend: 'cpu',
        prompt_tokens: [64, 256],
        gen_tokens: 32,
        runs: 3,
        quality_tokens: 512,
        remotes: [],
      },
    });
  });

  it('shows a progress row per format, and Cancel stops the run', async () => {
    const { user, called, container } = await setup(30);
    await user.selectOptions(screen.getByLabelText('Model'), 'cat:qwen3-0.6b');
    await screen.findAllByRole('checkbox', { name: /gguf|safetensors|mlx/ });
    await user.click(runButton());
    const progress = await screen.findByRole('region', { name: 'Benchmark in progress' });
    expect(within(progress).getAllByRole('progressbar')).toHaveLength(3);
    await waitFor(() => expect(progress.textContent).toMatch(/prompt 128 · run 1\/3/));
    expect(runButton().disabled).toBe(true);

    await user.click(within(progress).getByRole('button', { name: 'Cancel' }));
    expect(called('cancel_bench')).toHaveLength(1);
    await waitFor(() => expect(screen.queryByRole('region', { name: 'Benchmark in progress' })).toBeNull());
    expect((await screen.findByRole('status')).textContent).toMatch(/Stopped early/);
    const results = await screen.findByRole('region', { name: 'Results' });
    expect(results.textContent).toMatch(/stopped early/);
    expect(container.querySelectorAll('figure.chart-card').length).toBeGreaterThan(0);
  });

  it('runs to the end and shows verdicts, the table with the reference, and a chart per column', async () => {
    const { user } = await setup(1);
    await user.selectOptions(screen.getByLabelText('Model'), 'cat:qwen3-0.6b');
    await screen.findAllByRole('checkbox', { name: /gguf|safetensors|mlx/ });
    const runs = screen.getByLabelText(/^Runs/);
    await user.clear(runs);
    await user.type(runs, '1');
    await user.click(runButton());
    const results = await screen.findByRole('region', { name: 'Results' }, { timeout: 3000 });

    const verdicts = within(results).getByRole('list', { name: 'Verdicts' });
    expect(within(verdicts).getAllByRole('listitem')[0].textContent).toMatch(/decodes fastest/);

    const table = within(results).getByRole('table');
    const headers = within(table).getAllByRole('columnheader').map((h) => h.textContent?.trim() ?? '');
    expect(headers[0]).toBe('Format');
    const columns = headers.length - 1;
    expect(columns).toBe(4);
    const rows = within(table).getAllByRole('row').slice(1);
    expect(rows).toHaveLength(3);
    const reference = rows.filter((r) => r.textContent?.includes('(reference)'));
    expect(reference).toHaveLength(1);
    expect(reference[0].textContent).toMatch(/safetensors BF16/);

    const charts = results.querySelectorAll('figure.chart-card');
    expect(charts).toHaveLength(columns);
    const svg = charts[0].querySelector('svg.chart')!;
    expect(svg.querySelectorAll('rect.bar')).toHaveLength(3);
    expect(svg.querySelector('rect.bar.reference')?.classList.contains('f1')).toBe(true);
    expect(within(results).getAllByRole('button', { name: /Save the .* chart as PNG/ })).toHaveLength(columns);
    expect(within(results).getByRole('button', { name: 'Export as CSV' })).toBeTruthy();
  });

  it('lists remote engines’ models unticked; one alone is enough to run', async () => {
    const { user, called } = await setup(5, ['gpu-box:8000']);
    const group = screen.getByRole('group', { name: /Remote engines/ });
    const boxes = within(group).getAllByRole('checkbox') as HTMLInputElement[];
    expect(boxes.map((b) => b.checked)).toEqual([false, false]);
    expect(boxes[0].closest('label')?.textContent).toMatch(/Qwen\/Qwen3-8B\s*gpu-box:8000/);
    expect(runButton().disabled).toBe(true);
    expect(screen.getByText('Choose a model or add its files, or tick a remote model.')).toBeTruthy();

    await user.click(within(group).getByRole('checkbox', { name: /Qwen\/Qwen3-8B/ }));
    expect(runButton().disabled).toBe(false);
    await user.click(runButton());
    expect(called('start_bench')[0].args).toEqual({
      request: {
        model: 'Qwen/Qwen3-8B',
        paths: [],
        backend: 'auto',
        prompt_tokens: [128, 512],
        gen_tokens: 128,
        runs: 3,
        quality_tokens: 512,
        remotes: ['http://gpu-box:8000/v1#Qwen/Qwen3-8B'],
      },
    });
    const progress = await screen.findByRole('region', { name: 'Benchmark in progress' });
    expect(within(progress).getByRole('progressbar', { name: 'remote: Qwen/Qwen3-8B @ gpu-box:8000 progress' })).toBeTruthy();
    await user.click(within(progress).getByRole('button', { name: 'Cancel' }));
    expect(called('cancel_bench')).toHaveLength(1);
  });

  it('runs formats and a remote model side by side: dashes and no bars where not measured', async () => {
    const { user, called } = await setup(5, ['gpu-box:8000']);
    await user.selectOptions(screen.getByLabelText('Model'), 'cat:qwen3-0.6b');
    await screen.findAllByRole('checkbox', { name: /gguf|safetensors|mlx/ });
    await user.click(screen.getByRole('checkbox', { name: /mlx 4bit/ }));
    await user.click(screen.getByRole('checkbox', { name: /meta-llama\/Llama-3\.1-8B-Instruct/ }));
    const runs = screen.getByLabelText(/^Runs/);
    await user.clear(runs);
    await user.type(runs, '1');
    await user.click(runButton());
    expect(called('start_bench')[0].args.request.remotes).toEqual(['http://gpu-box:8000/v1#meta-llama/Llama-3.1-8B-Instruct']);
    const progress = await screen.findByRole('region', { name: 'Benchmark in progress' });
    const label = 'remote: meta-llama/Llama-3.1-8B-Instruct @ gpu-box:8000';
    expect(within(progress).getAllByRole('progressbar').map((p) => p.getAttribute('aria-label'))).toEqual([
      'gguf Q8_0 progress',
      'safetensors BF16 progress',
      `${label} progress`,
    ]);

    const results = await screen.findByRole('region', { name: 'Results' }, { timeout: 3000 });
    const table = within(results).getByRole('table');
    const headers = within(table).getAllByRole('columnheader').map((h) => h.textContent ?? '');
    const rows = within(table).getAllByRole('row').slice(1);
    expect(rows).toHaveLength(3);
    const remote = rows.find((r) => r.textContent?.includes(label))!;
    const cells = within(remote).getAllByRole('cell').map((c) => c.textContent?.trim());
    expect(cells).toHaveLength(headers.length - 1);
    const at = (title: string) => cells[headers.findIndex((h) => h.includes(title)) - 1];
    expect(at('Cold load')).toBe('–');
    expect(at('Peak memory')).toBe('–');
    expect(Number(at('Decode'))).toBeGreaterThan(0);

    const chart = (title: string) => within(results).getByRole('figure', { name: title }).querySelector('svg.chart')!;
    expect(chart('Cold load').querySelectorAll('rect.bar')).toHaveLength(2);
    expect(chart('Cold load').textContent).toMatch(/not measured/);
    expect(chart('Peak memory').querySelectorAll('rect.bar')).toHaveLength(2);
    expect(chart('Decode').querySelectorAll('rect.bar')).toHaveLength(3);
  });

  it('compares only exactly two picked runs', async () => {
    const { user, called } = await setup();
    const history = screen.getByRole('complementary', { name: 'Past runs' });
    const compare = within(history).getByRole('button', { name: 'Compare' }) as HTMLButtonElement;
    const picks = await within(history).findAllByRole('checkbox', { name: /^Pick the run/ });
    expect(picks).toHaveLength(2);
    expect(compare.disabled).toBe(true);
    await user.click(picks[0]);
    expect(compare.disabled).toBe(true);
    await user.click(picks[1]);
    expect(compare.disabled).toBe(false);
    await user.click(compare);
    expect(called('compare_bench_runs')).toHaveLength(1);
    const results = await screen.findByRole('region', { name: 'Results' });
    expect(within(results).getByRole('heading').textContent).toMatch(/^Comparison/);
    expect(results.textContent).toMatch(/A · gguf Q8_0/);
    expect(results.textContent).toMatch(/B · gguf Q8_0/);
    // A comparison is not a run: nothing to export.
    expect(within(results).queryByRole('button', { name: 'Export as JSON' })).toBeNull();
  });

  it('opens, deletes (after asking), imports a report and adds files', async () => {
    const { user, called } = await setup();
    const history = screen.getByRole('complementary', { name: 'Past runs' });
    const opens = await within(history).findAllByRole('button', { name: /^Open the run/ });
    await user.click(opens[0]);
    expect(await screen.findByRole('region', { name: 'Results' })).toBeTruthy();

    await user.click(within(history).getAllByRole('button', { name: /^Delete the run/ })[0]);
    await user.click(within(history).getByRole('button', { name: 'Delete?' }));
    await waitFor(() => expect(within(history).getAllByRole('button', { name: /^Open the run/ })).toHaveLength(1));
    expect(called('delete_bench_run')).toHaveLength(1);
    expect(screen.queryByRole('region', { name: 'Results' })).toBeNull();

    vi.stubGlobal('prompt', () => '/tmp/m2-report.json');
    await user.click(within(history).getByRole('button', { name: 'Import…' }));
    await waitFor(() => expect(within(history).getByText('m2-report')).toBeTruthy());
    expect(within(history).getByText('imported')).toBeTruthy();
    expect(called('import_bench_report')[0].args).toEqual({ path: '/tmp/m2-report.json' });
    expect((await screen.findByRole('region', { name: 'Results' })).textContent).toMatch(/m2-report/);

    vi.stubGlobal('prompt', () => '/x/Llama-Q4_K_M.gguf; /x/notes.txt');
    await user.click(screen.getByRole('button', { name: 'Add files…' }));
    expect((await screen.findByRole('alert')).textContent).toMatch(/notes\.txt" is not a model/);
    vi.stubGlobal('prompt', () => '/x/Llama-Q4_K_M.gguf; /x/Llama-mlx-4bit');
    await user.click(screen.getByRole('button', { name: 'Add files…' }));
    expect(await screen.findAllByRole('checkbox', { name: /gguf Q4_K_M|mlx 4bit/ })).toHaveLength(2);
    expect((screen.getByLabelText(/^Name/) as HTMLInputElement).value).toBe('x');
  });
});
