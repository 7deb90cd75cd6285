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
