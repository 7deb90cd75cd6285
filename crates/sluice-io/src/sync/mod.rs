//! Synchronization primitives that resolve task dependencies by I/O
//! priority inheritance (RCP §4.2.1): a [`Mutex`] and an [`RwLock`] that
//! know their owners, and a [`Condvar`] that infers its helper from who
//! signalled it before. A critical task that blocks on one raises the
//! owner or helper to critical until its wait ends, together with that
//! task's queued I/O (see [`crate::task`]).
//!
//! Built on `lock_api`: this module supplies only the raw lock with owner
//! tracking; guards and data access are lock_api's.

mod condvar;
mod raw;

pub use condvar::Condvar;
pub use raw::{RawInheritMutex, RawInheritRwLock};

/// A mutex whose owner inherits the criticality of its waiters.
pub type Mutex<T> = lock_api::Mutex<RawInheritMutex, T>;
pub type MutexGuard<'a, T> = lock_api::MutexGuard<'a, RawInheritMutex, T>;
/// A reader-writer lock whose holders inherit the criticality of waiters.
pub type RwLock<T> = lock_api::RwLock<RawInheritRwLock, T>;
