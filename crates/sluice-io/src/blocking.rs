//! What a thread's owner is told before the thread blocks in the runtime.
//!
//! A server that runs requests on a few threads, one per core, serves
//! every client it has taken from one thread in turn, as an event loop
//! does; while that thread waits on the device or on a lock, those clients
//! must not wait with it. Go's scheduler hands a blocked thread's
//! processor to another thread for the same reason. The runtime knows when
//! a thread is about to block: before each I/O it performs (the device may
//! take milliseconds), and before it waits for a lock, a condition
//! variable or another task's writes. [`before_blocking`] lets the thread's
//! owner act at that moment, once, with no cost on the paths that do not
//! block (a value found in memory).
//!
//! ```
//! use std::cell::Cell;
//! use std::rc::Rc;
//!
//! let handed_off = Rc::new(Cell::new(false));
//! let flag = handed_off.clone();
//! sluice_io::before_blocking(move || flag.set(true));
//! sluice_io::blocking(); // what the runtime calls before an I/O
//! sluice_io::blocking(); // once only
//! assert!(handed_off.get());
//! ```

use std::cell::Cell;

thread_local! {
    static HOOK: Cell<Option<Box<dyn FnOnce()>>> = const { Cell::new(None) };
}

/// Registers `f`, to be called on this thread before it next blocks in the
/// runtime, in place of what was registered before. It is called once; a
/// thread that wants to hear of the next blocking registers again.
pub fn before_blocking(f: impl FnOnce() + 'static) {
    HOOK.with(|h| h.set(Some(Box::new(f))));
}

/// Calls what [`before_blocking`] registered on this thread, if anything,
/// and forgets it. The runtime calls it before blocking; code that blocks
/// outside the runtime (a sleep) calls it too.
pub fn blocking() {
    if let Some(f) = HOOK.with(Cell::take) {
        f();
    }
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;
    use std::sync::Arc;

    use super::*;
    use crate::{Runtime, RuntimeConfig};

    /// Registers a hook on this thread; returns whether it has been called.
    fn watch() -> Rc<Cell<bool>> {
        let called = Rc::new(Cell::new(false));
        let flag = called.clone();
        before_blocking(move || flag.set(true));
        called
    }

    #[test]
    fn a_thread_that_waits_for_a_lock_says_so_first_and_one_that_takes_it_free_does_not() {
        let lock = Arc::new(crate::sync::Mutex::new(0));
        let called = watch();
        drop(lock.lock());
        assert!(!called.get(), "a free lock is no blocking");
        let held = lock.lock();
        let (told, hears) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn({
            let lock = lock.clone();
            move || {
                before_blocking(move || told.send(()).unwrap());
                *lock.lock() += 1;
            }
        });
        let heard = hears.recv_timeout(std::time::Duration::from_secs(10));
        drop(held);
        waiter.join().unwrap();
        assert!(heard.is_ok(), "the waiter's hook ran before it waited");
    }

    #[test]
    fn an_io_says_so_first() {
        let dir = tempfile::tempdir().unwrap();
        let rt = Runtime::new(RuntimeConfig::default()).unwrap();
        let file = rt.open(dir.path().join("f"), true).unwrap();
        file.write_at(b"data", 0).unwrap();
        let called = watch();
        let mut buf = [0u8; 4];
        file.read_at(&mut buf, 0).unwrap();
        assert!(called.get());
    }
}
