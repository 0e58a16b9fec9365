//! A guard for code that may panic on hostile input (third-party parsers, a generation step):
//! the panic becomes a message the caller turns into its own error, so no panic crosses an
//! API boundary and the program stays up.

use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `f`; a panic inside it comes back as `Err` with the panic's message.
///
/// State `f` touched may be half-updated after a panic: callers drop it or treat it as broken.
pub fn catch<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| panic_message(p.as_ref()))
}

/// The text of a panic payload (`&str` or `String`, as `panic!` makes them).
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_panic_becomes_its_message() {
        assert_eq!(super::catch(|| 7), Ok(7));
        let e = super::catch(|| -> u8 { panic!("bad {}", 3) }).unwrap_err();
        assert_eq!(e, "bad 3");
    }
}
