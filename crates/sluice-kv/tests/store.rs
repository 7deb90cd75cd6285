//! sluice-kv against a `BTreeMap`: random operations with flushes,
//! compactions and reopenings interleaved give identical results; writes
//! survive reopening; corrupt tables are reported, never read as data; bad
//! input is refused by name and leaves the store working.

use std::collections::BTreeMap;
use std::path::Path;

use proptest::prelude::*;
use sluice_io::{Knobs, Runtime, RuntimeConfig};
use sluice_kv::{Db, KvError, Options, WriteBatch};

/// Tiny sizes so that a few hundred operations flush, stall and compact
/// through several levels.
fn tiny(background: bool) -> Options {
    Options {
        memtable_bytes: 2048,
        table_bytes: 4096,
        block_bytes: 256,
        block_cache_bytes: 16 << 10,
        l0_compaction_trigger: 2,
        l0_slowdown_trigger: 3,
        l0_stop_trigger: 4,
        slowdown_delay_us: 0,
        level_base_bytes: 8 << 10,
        level_multiplier: 2,
        max_levels: 4,
        sync: false,
        background,
        ..Options::default()
    }
}

fn open(dir: &Path, background: bool) -> Db {
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    Db::open(rt, dir, tiny(background)).unwrap()
}

#[derive(Clone, Debug)]
enum Op {
    Put(u16, Vec<u8>),
    Delete(u16),
    Batch(Vec<(u16, Option<Vec<u8>>)>),
    Get(u16),
    Scan(u16, usize),
    Flush,
    Compact,
    Reopen,
}

fn key(k: u16) -> Vec<u8> {
    format!("key-{k:05}").into_bytes()
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0u16..300;
    let v = prop::collection::vec(any::<u8>(), 0..64);
    prop_oneof![
        8 => (k.clone(), v.clone()).prop_map(|(k, v)| Op::Put(k, v)),
        2 => k.clone().prop_map(Op::Delete),
        1 => prop::collection::vec((k.clone(), prop::option::of(v)), 1..8).prop_map(Op::Batch),
        4 => k.clone().prop_map(Op::Get),
        1 => (k, 0usize..40).prop_map(|(k, n)| Op::Scan(k, n)),
        1 => Just(Op::Flush),
        1 => Just(Op::Compact),
        1 => Just(Op::Reopen),
    ]
}

fn apply(
    slot: &mut Option<Db>,
    model: &mut BTreeMap<Vec<u8>, Vec<u8>>,
    op: Op,
    dir: &Path,
) -> Result<(), TestCaseError> {
    let db = slot.as_mut().expect("the store is open between operations");
    match op {
        Op::Put(k, v) => {
            db.put(&key(k), &v).unwrap();
            model.insert(key(k), v);
        }
        Op::Delete(k) => {
            db.delete(&key(k)).unwrap();
            model.remove(&key(k));
        }
        Op::Batch(ops) => {
            let mut b = WriteBatch::new();
            for (k, v) in ops {
                match v {
                    Some(v) => {
                        b.put(key(k), v.clone());
                        model.insert(key(k), v);
                    }
                    None => {
                        b.delete(key(k));
                        model.remove(&key(k));
                    }
                }
            }
            db.write(b).unwrap();
        }
        Op::Get(k) => prop_assert_eq!(db.get(&key(k)).unwrap(), model.get(&key(k)).cloned()),
        Op::Scan(k, n) => {
            let want: Vec<_> = model
                .range(key(k)..)
                .take(n)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            prop_assert_eq!(db.scan(&key(k), None, n).unwrap(), want);
        }
        Op::Flush => db.flush().unwrap(),
        Op::Compact => db.compact().unwrap(),
        Op::Reopen => {
            // Closed before it opens again: one open store per directory.
            *slot = None;
            *slot = Some(open(dir, false));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn behaves_like_a_btreemap(ops in prop::collection::vec(op(), 1..1500)) {
        let dir = tempfile::tempdir().unwrap();
        let mut db = Some(open(dir.path(), false));
        let mut model = BTreeMap::new();
        for op in ops {
            apply(&mut db, &mut model, op, dir.path())?;
        }
        let db = db.expect("the store is open after the operations");
        let all: Vec<_> = model.into_iter().collect();
        prop_assert_eq!(db.scan(b"", None, usize::MAX).unwrap(), all.clone());
        drop(db);
        let db = open(dir.path(), false);
        prop_assert_eq!(db.scan(b"", None, usize::MAX).unwrap(), all);
    }
}

#[test]
fn background_flush_and_compaction_keep_every_write() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), true);
    std::thread::scope(|s| {
        for t in 0..4u16 {
            let db = &db;
            s.spawn(move || {
                for i in 0..2000u16 {
                    db.put(&key(t * 10_000 + i), &[t as u8; 40]).unwrap();
                }
            });
        }
    });
    let stats = db.stats();
    assert!(
        stats.levels.iter().skip(1).any(|&(n, _)| n > 0),
        "compaction reached L1: {stats:?}"
    );
    for t in 0..4u16 {
        for i in (0..2000u16).step_by(7) {
            assert_eq!(db.get(&key(t * 10_000 + i)).unwrap(), Some(vec![t as u8; 40]));
        }
    }
    drop(db);
    let db = open(dir.path(), false);
    assert_eq!(db.scan(b"", None, usize::MAX).unwrap().len(), 8000);
}

#[test]
fn a_paused_compaction_waits_until_writers_would_stop() {
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    let options = Options {
        l0_slowdown_trigger: 6,
        l0_stop_trigger: 8,
        ..tiny(true)
    };
    let db = Db::open(rt, dir.path(), options).unwrap();
    let task = db.compaction_task().clone();
    task.set_knobs(Knobs {
        paused: true,
        ..task.knobs()
    });
    let l0 = |db: &Db| db.stats().levels[0].0;
    let mut i = 0;
    while l0(&db) < 5 {
        db.put(&key(i), &[7; 64]).unwrap();
        i += 1;
    }
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(task.stats().bytes, 0, "a paused compaction ran below the stop trigger");
    assert!(l0(&db) >= 5);
    // From the compaction trigger (2) to the slowdown trigger (6).
    let near = ((l0(&db) as f64 - 2.0) / 4.0).min(1.0);
    assert_eq!(task.stats().stall_pressure, near, "the stall's nearness, reported");
    // Writes go on past the stop trigger: the compaction that their stall
    // waits for runs, paused or not.
    for _ in 0..2000 {
        db.put(&key(i % 300), &[8; 64]).unwrap();
        i += 1;
    }
    assert!(task.stats().bytes > 0, "the stop trigger did not lift the pause");
    task.set_knobs(Knobs {
        paused: false,
        ..task.knobs()
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while l0(&db) >= 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "resumed, L0 stayed at {}",
            l0(&db)
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(task.stats().stall_pressure, 0.0, "L0 below its trigger: no pressure");
}

/// Writers stopped on frozen memtables wait on the flush: a critical
/// writer raises the flush worker, whose I/O then runs through its pause,
/// as the writers' requests would have it (RCP's inheritance). Before, the
/// writers named whichever worker had signalled last, and none here.
#[test]
fn a_paused_flush_runs_for_the_critical_writers_it_stops() {
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    let db = std::sync::Arc::new(Db::open(rt, dir.path(), tiny(true)).unwrap());
    let task = db.flush_task().clone();
    task.set_knobs(Knobs {
        paused: true,
        ..task.knobs()
    });
    let writer = std::thread::spawn({
        let db = db.clone();
        move || {
            let _request = sluice_io::enter(sluice_core::Ctx::new(1, 0));
            // Ten memtables' worth: past every frozen memtable the store
            // holds before writes stop.
            for i in 0..400 {
                db.put(&key(i), &[9; 64]).unwrap();
            }
        }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !writer.is_finished() {
        assert!(
            std::time::Instant::now() < deadline,
            "the writer stopped for good behind a paused flush: {:?}",
            db.stats()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    writer.join().unwrap();
    assert!(task.stats().bytes > 0, "the flush wrote nothing");
}

#[test]
fn a_directory_holds_one_open_store_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    let first = Db::open(rt.clone(), dir.path(), Options::default()).unwrap();
    first.put(b"k", b"first").unwrap();
    match Db::open(rt.clone(), dir.path(), Options::default()) {
        Err(KvError::InUse { dir: named }) => assert_eq!(named, dir.path()),
        Err(other) => panic!("a second open failed otherwise: {other}"),
        Ok(_) => panic!("a second store opened on a directory in use"),
    }
    assert_eq!(
        first.get(b"k").unwrap(),
        Some(b"first".to_vec()),
        "the first store is untouched"
    );
    drop(first);
    let again = Db::open(rt, dir.path(), Options::default()).unwrap();
    assert_eq!(again.get(b"k").unwrap(), Some(b"first".to_vec()));
}

#[test]
fn synced_writes_survive_reopening_without_a_flush() {
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    let db = Db::open(rt.clone(), dir.path(), Options::default()).unwrap();
    for i in 0..100u16 {
        db.put(&key(i), b"durable").unwrap();
    }
    db.delete(&key(5)).unwrap();
    drop(db);
    let db = Db::open(rt, dir.path(), Options::default()).unwrap();
    assert_eq!(db.get(&key(4)).unwrap(), Some(b"durable".to_vec()));
    assert_eq!(db.get(&key(5)).unwrap(), None);
    assert_eq!(db.scan(b"", None, usize::MAX).unwrap().len(), 99);
}

#[test]
fn a_corrupt_table_is_reported_never_read_as_data() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), false);
    for i in 0..60u16 {
        db.put(&key(i), &[b'v'; 30]).unwrap();
    }
    db.flush().unwrap();
    drop(db);
    let table = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "sst"))
        .expect("a flushed table");
    let mut bytes = std::fs::read(&table).unwrap();
    bytes[100] ^= 0x40;
    std::fs::write(&table, &bytes).unwrap();
    let db = open(dir.path(), false);
    let mut corrupt = 0;
    for i in 0..60u16 {
        match db.get(&key(i)) {
            Ok(v) => assert_eq!(v, Some(vec![b'v'; 30]), "key {i}"),
            Err(KvError::Corruption { path, .. }) => {
                assert_eq!(path, table);
                corrupt += 1;
            }
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    assert!(corrupt > 0, "the flipped byte was not detected");
}

#[test]
fn bad_input_is_refused_by_name_and_the_store_keeps_working() {
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::new(RuntimeConfig::default()).unwrap();
    let options = Options {
        max_key_bytes: 16,
        max_value_bytes: 32,
        ..Options::default()
    };
    let db = Db::open(rt.clone(), dir.path(), options).unwrap();
    assert!(matches!(db.put(b"", b"x"), Err(KvError::EmptyKey)));
    let long_key = db.put(&[b'k'; 17], b"x").unwrap_err();
    assert!(long_key.to_string().contains("17 bytes"), "{long_key}");
    assert!(matches!(
        db.put(b"k", &[0; 33]),
        Err(KvError::ValueTooLarge { len: 33, limit: 32 })
    ));
    let mut b = WriteBatch::new();
    b.put("ok", "1").put(vec![b'k'; 17], "2");
    assert!(db.write(b).is_err());
    assert_eq!(db.get(b"ok").unwrap(), None, "a refused batch writes nothing");
    db.put(b"k", b"fine").unwrap();
    assert_eq!(db.get(b"k").unwrap(), Some(b"fine".to_vec()));
    let bad = Options {
        l0_stop_trigger: 1,
        ..Options::default()
    };
    let e = Db::open(rt, dir.path().join("other"), bad).err().expect("refused");
    assert!(e.to_string().contains("l0 triggers"), "{e}");
}
