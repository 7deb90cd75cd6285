//! The YCSB core workloads (Cooper et al., SoCC 2010, Table 2; the
//! background-tasks paper §IV uses A–F): operation mix, request
//! distribution, record size, and the key of a record.
//!
//! | workload | mix | distribution |
//! |---|---|---|
//! | A | 50% read, 50% update | Zipfian |
//! | B | 95% read, 5% update | Zipfian |
//! | C | 100% read | Zipfian |
//! | D | 95% read, 5% insert | latest |
//! | E | 95% scan (1–100 records), 5% insert | Zipfian |
//! | F | 50% read, 50% read-modify-write | Zipfian |
//!
//! As in YCSB, Zipfian picks are scrambled (a popular rank maps to a
//! hashed record number, so popular records are spread over the key
//! space), with θ = 0.99; keys are `user` + the FNV-1a hash of the record
//! number. Departure: a record is one value of `field_count ×
//! field_length` bytes (the store has no fields), and Zipfian picks range
//! over the records loaded, not over inserts made during the run
//! (YCSB's default `insertorder=hashed` behaves the same way for reads).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use rand_distr::{Distribution as _, Zipf};
use rand_pcg::Pcg64;

use crate::error::{BenchError, Result};

const ZIPF_THETA: f64 = 0.99;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Distribution {
    Uniform,
    Zipfian,
    Latest,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub name: String,
    pub read: f64,
    pub update: f64,
    pub insert: f64,
    pub scan: f64,
    pub read_modify_write: f64,
    pub distribution: Distribution,
    pub max_scan_length: usize,
    pub record_count: u64,
    pub field_count: usize,
    pub field_length: usize,
}

impl Workload {
    /// Core workload `letter` (A–F) over `record_count` records of YCSB's
    /// default size (10 fields of 100 bytes).
    pub fn core(letter: char, record_count: u64) -> Result<Workload> {
        let (read, update, insert, scan, rmw, distribution) = match letter.to_ascii_uppercase() {
            'A' => (0.5, 0.5, 0.0, 0.0, 0.0, Distribution::Zipfian),
            'B' => (0.95, 0.05, 0.0, 0.0, 0.0, Distribution::Zipfian),
            'C' => (1.0, 0.0, 0.0, 0.0, 0.0, Distribution::Zipfian),
            'D' => (0.95, 0.0, 0.05, 0.0, 0.0, Distribution::Latest),
            'E' => (0.0, 0.0, 0.05, 0.95, 0.0, Distribution::Zipfian),
            'F' => (0.5, 0.0, 0.0, 0.0, 0.5, Distribution::Zipfian),
            other => return Err(BenchError::Workload(format!("no core workload '{other}': A to F"))),
        };
        if record_count == 0 {
            return Err(BenchError::Workload("record_count must be at least 1".into()));
        }
        Ok(Workload {
            name: format!("ycsb-{}", letter.to_ascii_lowercase()),
            read,
            update,
            insert,
            scan,
            read_modify_write: rmw,
            distribution,
            max_scan_length: 100,
            record_count,
            field_count: 10,
            field_length: 100,
        })
    }

    pub fn record_bytes(&self) -> usize {
        self.field_count * self.field_length
    }
}

/// One operation of a workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Read(Vec<u8>),
    Update(Vec<u8>),
    Insert(Vec<u8>),
    Scan(Vec<u8>, usize),
    ReadModifyWrite(Vec<u8>),
}

/// The key of record `n`.
pub fn key(n: u64) -> Vec<u8> {
    format!("user{}", fnv1a(n)).into_bytes()
}

fn fnv1a(n: u64) -> u64 {
    n.to_le_bytes()
        .iter()
        .fold(0xcbf29ce484222325, |h, &b| (h ^ b as u64).wrapping_mul(0x100000001b3))
}

/// Draws operations; one per client thread, seeded. `records` is shared by
/// the threads of a workload so that inserts get fresh record numbers.
pub struct Generator {
    workload: Workload,
    rng: Pcg64,
    zipf: Zipf<f64>,
    records: Arc<AtomicU64>,
}

impl Generator {
    pub fn new(workload: Workload, seed: u64, records: Arc<AtomicU64>) -> Result<Generator> {
        let zipf = Zipf::new(workload.record_count, ZIPF_THETA)
            .map_err(|e| BenchError::Workload(format!("zipfian over {} records: {e}", workload.record_count)))?;
        Ok(Generator {
            workload,
            rng: Pcg64::seed_from_u64(seed),
            zipf,
            records,
        })
    }

    pub fn workload(&self) -> &Workload {
        &self.workload
    }

    /// A record number to read or update.
    fn existing(&mut self) -> u64 {
        let loaded = self.workload.record_count;
        match self.workload.distribution {
            Distribution::Uniform => self.rng.gen_range(0..loaded),
            Distribution::Zipfian => fnv1a(self.zipf.sample(&mut self.rng) as u64) % loaded,
            Distribution::Latest => {
                let newest = self.records.load(Ordering::Relaxed).max(1) - 1;
                newest.saturating_sub(self.zipf.sample(&mut self.rng) as u64 - 1)
            }
        }
    }

    pub fn next_op(&mut self) -> Op {
        let w = &self.workload;
        let (r, u, i, s) = (w.read, w.update, w.insert, w.scan);
        let x: f64 = self.rng.gen();
        if x < r {
            Op::Read(key(self.existing()))
        } else if x < r + u {
            Op::Update(key(self.existing()))
        } else if x < r + u + i {
            Op::Insert(key(self.records.fetch_add(1, Ordering::Relaxed)))
        } else if x < r + u + i + s {
            let len = self.rng.gen_range(1..=self.workload.max_scan_length);
            Op::Scan(key(self.existing()), len)
        } else {
            Op::ReadModifyWrite(key(self.existing()))
        }
    }

    /// A record's value: random bytes of the workload's record size.
    pub fn value(&mut self) -> Vec<u8> {
        let mut v = vec![0u8; self.workload.record_bytes()];
        self.rng.fill(&mut v[..]);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mix(letter: char) -> [usize; 5] {
        let w = Workload::core(letter, 1000).unwrap();
        let mut g = Generator::new(w, 7, Arc::new(AtomicU64::new(1000))).unwrap();
        let mut counts = [0; 5];
        for _ in 0..20_000 {
            let i = match g.next_op() {
                Op::Read(_) => 0,
                Op::Update(_) => 1,
                Op::Insert(_) => 2,
                Op::Scan(_, n) => {
                    assert!((1..=100).contains(&n));
                    3
                }
                Op::ReadModifyWrite(_) => 4,
            };
            counts[i] += 1;
        }
        counts
    }

    #[test]
    fn operation_mixes_follow_the_workload() {
        let near = |n: usize, p: f64| (n as f64 / 20_000.0 - p).abs() < 0.02;
        let a = mix('A');
        assert!(near(a[0], 0.5) && near(a[1], 0.5), "{a:?}");
        let d = mix('d');
        assert!(near(d[0], 0.95) && near(d[2], 0.05), "{d:?}");
        let e = mix('E');
        assert!(near(e[3], 0.95) && near(e[2], 0.05), "{e:?}");
        let f = mix('F');
        assert!(near(f[0], 0.5) && near(f[4], 0.5), "{f:?}");
        assert!(Workload::core('G', 10).is_err());
        assert!(Workload::core('A', 0).is_err());
    }

    #[test]
    fn zipfian_is_skewed_and_latest_favours_new_records() {
        let w = Workload::core('C', 10_000).unwrap();
        let mut g = Generator::new(w, 1, Arc::new(AtomicU64::new(10_000))).unwrap();
        let mut hits = std::collections::HashMap::new();
        for _ in 0..50_000 {
            let Op::Read(k) = g.next_op() else { unreachable!() };
            *hits.entry(k).or_insert(0usize) += 1;
        }
        let mut counts: Vec<usize> = hits.into_values().collect();
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let top_1pct: usize = counts.iter().take(100).sum();
        assert!(
            top_1pct > 50_000 / 4,
            "the hottest 1% of records get {top_1pct} of 50000 reads"
        );
        let records = Arc::new(AtomicU64::new(10_000));
        let reads_only = Workload {
            read: 1.0,
            insert: 0.0,
            ..Workload::core('D', 10_000).unwrap()
        };
        let mut g = Generator::new(reads_only, 1, records).unwrap();
        let newest = (9_900..10_000).map(key).collect::<std::collections::HashSet<_>>();
        let recent = (0..10_000)
            .filter(|_| matches!(g.next_op(), Op::Read(k) if newest.contains(&k)))
            .count();
        // Zipfian(0.99) puts H(100)/H(10000), about 53%, on the top 100 ranks.
        assert!(recent > 4_500, "{recent} of 10000 reads hit the newest 100 records");
    }
}
