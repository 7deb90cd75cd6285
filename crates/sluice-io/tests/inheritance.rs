//! I/O priority inheritance (RCP §4.2, §4.4), each case measured with
//! inheritance on and off against the same background flood: on, the
//! critical task finishes quickly; off, it waits behind the flood. Each test
//! fails if inheritance is disabled.

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use sluice_core::Ctx;
use sluice_io::sync::{Condvar, Mutex};
use sluice_io::{enter, Runtime};

const FLOOD: usize = 16;

/// Runs `case` on a fresh runtime under the flood; returns its result.
fn under_flood(inheritance: bool, case: impl FnOnce(&Runtime, &std::path::Path) -> Duration) -> Duration {
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::new(common::slow_ssd(inheritance)).unwrap();
    let _flood = common::flood(&rt, dir.path(), FLOOD);
    std::thread::sleep(Duration::from_millis(20));
    case(&rt, dir.path())
}

/// Asserts that inheritance makes the case at least 3× faster.
fn check(name: &str, case: impl Fn(&Runtime, &std::path::Path) -> Duration) {
    let on = under_flood(true, &case);
    let off = under_flood(false, &case);
    eprintln!("{name}: inheritance on {on:?}, off {off:?}");
    assert!(on * 3 < off, "{name}: on {on:?} is not 3x faster than off {off:?}");
}

/// A background task takes `m` and writes `writes` blocks while holding it.
fn holder_writing(rt: &Runtime, dir: &std::path::Path, m: &'static Mutex<()>, writes: u64) -> mpsc::Receiver<()> {
    let (held, rx) = mpsc::channel();
    let f = rt.open(dir.join("held"), true).unwrap();
    std::thread::spawn(move || {
        let _g = m.lock();
        held.send(()).unwrap();
        for i in 0..writes {
            f.write_at(&[1u8; 4096], i * 4096).unwrap();
        }
    });
    rx
}

fn leak<T>(t: T) -> &'static T {
    Box::leak(Box::new(t))
}

#[test]
fn a_critical_waiter_raises_the_lock_holder_and_its_io() {
    check("mutex", |rt, dir| {
        let m = leak(Mutex::new(()));
        holder_writing(rt, dir, m, 5).recv().unwrap();
        let _req = enter(Ctx::new(1, 0));
        let start = Instant::now();
        drop(m.lock());
        start.elapsed()
    });
}

#[test]
fn syncing_a_file_promotes_its_pending_background_writes() {
    check("sync", |rt, dir| {
        let f = rt.open(dir.join("shared"), true).unwrap();
        let writer = f.clone();
        let bg = rt.register_background("writer", sluice_io::TaskKind::Flush);
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let w = std::thread::spawn(move || {
            let _bg = bg.enter();
            let mut off = 0;
            while stop_rx.try_recv().is_err() {
                writer.write_at(&[2u8; 4096], off).unwrap();
                off += 4096;
            }
        });
        std::thread::sleep(Duration::from_millis(10));
        let _req = enter(Ctx::new(2, 0));
        let start = Instant::now();
        for _ in 0..5 {
            f.sync().unwrap();
        }
        let took = start.elapsed();
        stop_tx.send(()).unwrap();
        w.join().unwrap();
        took
    });
}

#[test]
fn a_four_step_chain_is_resolved() {
    // fg -> mutex m1 (held by b1) -> condvar (helper b2) -> mutex m2
    // (held by b3) -> b3's queued writes, as in RCP §4.4.
    check("chain", |rt, dir| {
        let m1 = leak(Mutex::new(()));
        let m2 = leak(Mutex::new(()));
        let ready = leak(Mutex::new(false));
        let cv = leak(Condvar::new());
        holder_writing(rt, dir, m2, 4).recv().unwrap();
        let (b2_primed, primed) = mpsc::channel();
        std::thread::spawn(move || {
            cv.notify_all();
            b2_primed.send(()).unwrap();
            drop(m2.lock());
            *ready.lock() = true;
            cv.notify_all();
        });
        primed.recv().unwrap();
        let (b1_holds, holds) = mpsc::channel();
        std::thread::spawn(move || {
            let _g1 = m1.lock();
            b1_holds.send(()).unwrap();
            let mut r = ready.lock();
            while !*r {
                cv.wait(&mut r);
            }
        });
        holds.recv().unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let _req = enter(Ctx::new(3, 0));
        let start = Instant::now();
        drop(m1.lock());
        start.elapsed()
    });
}

#[test]
fn a_critical_writer_raises_the_readers_of_a_rwlock() {
    check("rwlock", |rt, dir| {
        let l = leak(sluice_io::sync::RwLock::new(()));
        let (held, rx) = mpsc::channel();
        let f = rt.open(dir.join("read-held"), true).unwrap();
        std::thread::spawn(move || {
            let _r = l.read();
            held.send(()).unwrap();
            for i in 0..5 {
                f.write_at(&[3u8; 4096], i * 4096).unwrap();
            }
        });
        rx.recv().unwrap();
        let _req = enter(Ctx::new(4, 0));
        let start = Instant::now();
        drop(l.write());
        start.elapsed()
    });
}
