//! RCP's block-layer stages as one state machine (RCP §4.3): admission into
//! per-class slot pools, dispatch from two queues (critical first, with a
//! starvation guarantee for non-critical I/O), and a bound on non-critical
//! I/Os outstanding at the device; plus promotion of an outstanding
//! non-critical I/O wherever it waits (§4.2.2), the `ncio` of RCP.
//!
//! Departure: RCP's device bound holds at all times, so background work
//! alone gets one I/O at the device and a fraction of its bandwidth (0.13×
//! of FIFO's on the emulated SSD, docs/BENCHMARKS.md "RCP §7.6"). Here the
//! bound holds while critical I/O waits or is in the device, and for
//! `critical_idle_ms` after the last critical I/O arrived or finished (the
//! next one is expected); past that, up to `noncritical_lifted_bound`
//! non-critical I/Os may be at the device, as SILK lets compaction use the
//! bandwidth the foreground leaves. A critical I/O that arrives then waits
//! for the non-critical I/O already in the device, one piece each
//! (`noncritical_piece_kb`), and no more enters before it. While the bound
//! is lifted a piece keeps the device for the next one: pieces bound what a
//! critical I/O waits for, and none waits then.
//! `critical_idle_ms = 0` keeps RCP's bound.
//!
//! Seek-aware policies (`sstf`, `edf`'s neighbours, `traqios`) decide with
//! the device as the dispatcher sees it ([`DispatchView`], set with
//! [`Sched::with_view`]): the head where the last I/O it let in leaves it,
//! exact for an emulated seek disk, which serves in dispatch order.
//! Deadline policies also hear when requests arrive and finish
//! ([`Sched::request_arrived`]), as the simulator tells them.
//!
//! Pure: time comes in as an argument and the machine only says which I/Os
//! may enter the device, so the runtime drives it in wall time and the
//! property tests drive it directly. The order within each queue is any
//! sluice-core [`Policy`]; RCP's own scheduler is two FIFO queues.
//!
//! With `split_admission` off there is one pool for all I/O; with
//! `two_queues` off there is one queue, in which the device bound cannot be
//! applied (the policy, not the class, picks the next job) and is ignored.
//! With RCP disabled every I/O is critical, which gives one FIFO path.

use std::collections::VecDeque;

use rustc_hash::{FxHashMap, FxHashSet};
use sluice_core::device::{DispatchView, FlatDevice};
use sluice_core::{Ctx, Job, Nanos, Policy};

use crate::config::RcpConfig;

/// Critical I/O is on a request's path; non-critical I/O is not (yet).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Criticality {
    Critical,
    NonCritical,
}

const CRIT: usize = 0;
const NONCRIT: usize = 1;

impl Criticality {
    fn index(self) -> usize {
        match self {
            Criticality::Critical => CRIT,
            Criticality::NonCritical => NONCRIT,
        }
    }
}

/// Where an outstanding I/O is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location {
    Admission,
    Queued,
    Device,
}

#[derive(Debug)]
struct Entry {
    job: Job,
    class: Criticality,
    location: Location,
    /// The slot pool it waits for or holds.
    pool: usize,
    /// Counted against the non-critical device bound.
    bounded: bool,
    /// When it last entered the device.
    entered: Nanos,
}

/// Counters for reports and for the leak checks of the tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Occupancy {
    pub admitted: [usize; 2],
    pub waiting_admission: [usize; 2],
    pub queued: [usize; 2],
    pub in_device: usize,
    pub noncritical_in_device: usize,
    pub promotions: u64,
}

pub struct Sched {
    config: RcpConfig,
    depth: usize,
    capacity: [usize; 2],
    admitted: [usize; 2],
    admission: [VecDeque<u64>; 2],
    queues: [Box<dyn Policy>; 2],
    /// Promoted jobs whose copy still sits in the non-critical queue.
    ghosts: FxHashSet<u64>,
    ios: FxHashMap<u64, Entry>,
    in_device: usize,
    noncritical_in_device: usize,
    /// Start of the current starvation interval of the non-critical queue.
    noncritical_clock: Nanos,
    /// When critical I/O last arrived or finished.
    last_critical: Option<Nanos>,
    promotions: u64,
    /// Nanoseconds I/Os spent in the device, dispatch to completion.
    held: Nanos,
    /// The device as the policies see it at each decision.
    view: Box<dyn DispatchView>,
}

impl Sched {
    /// `queues` are two fresh instances of the configured policy.
    pub fn new(config: RcpConfig, depth: usize, queues: [Box<dyn Policy>; 2]) -> Self {
        let capacity = if config.enabled && config.split_admission {
            [config.critical_slots, config.noncritical_slots]
        } else {
            [config.critical_slots + config.noncritical_slots, 0]
        };
        Sched {
            config,
            depth: depth.max(1),
            capacity,
            admitted: [0; 2],
            admission: Default::default(),
            queues,
            ghosts: FxHashSet::default(),
            ios: FxHashMap::default(),
            in_device: 0,
            noncritical_in_device: 0,
            noncritical_clock: 0,
            last_critical: None,
            promotions: 0,
            held: 0,
            view: Box::new(FlatDevice::default()),
        }
    }

    /// Decides with `view` of the device instead of a flat one.
    pub fn with_view(mut self, view: Box<dyn DispatchView>) -> Self {
        self.view = view;
        self
    }

    /// The position policies see for the device address `offset` (a
    /// job's `pos`).
    pub fn position(&self, offset: u64) -> u64 {
        self.view.position(offset)
    }

    /// A request began; its I/Os follow (TraQIOS counts its expected
    /// accesses from now, §3.2.2).
    pub fn request_arrived(&mut self, ctx: &Ctx, now: Nanos) {
        for q in &mut self.queues {
            q.request_arrived(ctx, now);
        }
    }

    /// A request ended: it left the system at `now` (met or missed its
    /// deadline, which the success rate U of Eq. 2 counts).
    pub fn request_finished(&mut self, ctx: &Ctx, now: Nanos) {
        for q in &mut self.queues {
            q.request_finished(ctx, now);
        }
    }

    fn pool_of(&self, class: Criticality) -> usize {
        if self.capacity[NONCRIT] == 0 {
            CRIT
        } else {
            class.index()
        }
    }

    fn queue_of(&self, class: Criticality) -> usize {
        if self.config.enabled && self.config.two_queues {
            class.index()
        } else {
            CRIT
        }
    }

    /// A new I/O arrives. Returns the I/Os (this one or others) that may
    /// now enter the device. `job.seq` must be unique among outstanding I/Os.
    pub fn submit(&mut self, job: Job, class: Criticality, now: Nanos) -> Vec<u64> {
        let class = if self.config.enabled {
            class
        } else {
            Criticality::Critical
        };
        let pool = self.pool_of(class);
        let seq = job.seq;
        if class == Criticality::Critical {
            self.last_critical = Some(now);
        }
        self.ios.insert(
            seq,
            Entry {
                job,
                class,
                location: Location::Admission,
                pool,
                bounded: false,
                entered: 0,
            },
        );
        if self.admitted[pool] < self.capacity[pool] {
            self.admit(seq, now);
        } else {
            self.admission[pool].push_back(seq);
        }
        self.dispatch(now)
    }

    fn admit(&mut self, seq: u64, now: Nanos) {
        let e = self.ios.get_mut(&seq).expect("admitted I/O is outstanding");
        self.admitted[e.pool] += 1;
        self.enqueue(seq, now);
    }

    /// Puts an admitted I/O in its class's queue.
    fn enqueue(&mut self, seq: u64, now: Nanos) {
        let e = self.ios.get_mut(&seq).expect("queued I/O is outstanding");
        e.location = Location::Queued;
        let (class, job) = (e.class, e.job);
        let q = self.queue_of(class);
        if q == NONCRIT && self.live_noncritical() == 0 {
            self.noncritical_clock = now;
        }
        self.queues[q].push(job, now);
    }

    fn live_noncritical(&self) -> usize {
        self.queues[NONCRIT].len() - self.ghosts.len()
    }

    /// Moves I/Os into the device while it has room, in the configured order.
    fn dispatch(&mut self, now: Nanos) -> Vec<u64> {
        let mut entered = Vec::new();
        while self.in_device < self.depth {
            let Some(q) = self.next_queue(now) else { break };
            let Some(job) = self.pop_live(q, now) else { break };
            self.view.dispatched(job.pos);
            let e = self.ios.get_mut(&job.seq).expect("queued I/O is outstanding");
            e.location = Location::Device;
            e.entered = now;
            self.in_device += 1;
            if q == NONCRIT {
                e.bounded = true;
                self.noncritical_in_device += 1;
                self.noncritical_clock = now;
            }
            entered.push(job.seq);
        }
        entered
    }

    /// When the scheduler must be stepped ([`Sched::poll`]) though no I/O
    /// arrives or finishes before: a policy holds queued I/O back with the
    /// device free (`cfq`'s anticipation, [`Policy::wake_at`]). `None`
    /// while the device is full, since a completion steps it then.
    pub fn wake_at(&self) -> Option<Nanos> {
        if self.in_device >= self.depth {
            return None;
        }
        self.queues.iter().filter_map(|q| q.wake_at()).min()
    }

    /// Steps the scheduler at `now` with nothing new: returns the I/Os a
    /// policy that held them back now lets into the device.
    pub fn poll(&mut self, now: Nanos) -> Vec<u64> {
        self.dispatch(now)
    }

    /// Whether the device bound holds now: critical I/O waits, is in the
    /// device, or is expected (see the module doc).
    fn bound_holds(&self, now: Nanos) -> bool {
        let Some(idle) = self.config.critical_idle() else {
            return true;
        };
        !self.queues[CRIT].is_empty()
            || self.in_device > self.noncritical_in_device
            || self.last_critical.is_some_and(|t| now.saturating_sub(t) < idle)
    }

    /// Which queue serves next: critical first, unless the non-critical
    /// queue has waited a whole starvation interval.
    fn next_queue(&self, now: Nanos) -> Option<usize> {
        let crit = !self.queues[CRIT].is_empty();
        let (held, lifted) = (
            self.config.noncritical_device_bound,
            self.config.noncritical_lifted_bound,
        );
        let bound = match held {
            0 => 0,
            _ if self.bound_holds(now) => held,
            _ if lifted == 0 => 0,
            _ => lifted.max(held),
        };
        let may_noncrit = self.live_noncritical() > 0 && (bound == 0 || self.noncritical_in_device < bound);
        let starving = now.saturating_sub(self.noncritical_clock) >= self.config.starvation();
        match (crit, may_noncrit) {
            (_, true) if starving || !crit => Some(NONCRIT),
            (true, _) => Some(CRIT),
            _ => None,
        }
    }

    fn pop_live(&mut self, q: usize, now: Nanos) -> Option<Job> {
        loop {
            let job = self.queues[q].pop(now, &*self.view)?;
            if q == CRIT || !self.ghosts.remove(&job.seq) {
                return Some(job);
            }
        }
    }

    /// The I/O left the device. Frees its slot, admits the next waiter of
    /// its pool and returns the I/Os that may now enter the device.
    pub fn complete(&mut self, seq: u64, now: Nanos) -> Vec<u64> {
        let Some(e) = self.ios.remove(&seq) else {
            return Vec::new();
        };
        debug_assert_eq!(e.location, Location::Device);
        self.held += now.saturating_sub(e.entered);
        self.in_device -= 1;
        if e.bounded {
            self.noncritical_in_device -= 1;
        }
        if e.class == Criticality::Critical {
            self.last_critical = Some(now);
        }
        self.admitted[e.pool] -= 1;
        if let Some(next) = self.admission[e.pool].pop_front() {
            self.admit(next, now);
        }
        self.dispatch(now)
    }

    /// A non-critical I/O in the device has done one piece and gives the
    /// device back (RCP's device bound counted in bytes, see the runtime):
    /// it queues again behind the I/O of its class that arrived meanwhile,
    /// keeping its admission slot. Returns the I/Os that may now enter the
    /// device, which include this one if nothing else waits. A critical I/O
    /// (or one promoted since it entered) keeps the device and gets `[]`,
    /// and so does any I/O while the bound is lifted: pieces bound what a
    /// critical I/O waits for, and none waits or is expected then, so
    /// giving the device back would only cost its thread a park and a wake.
    pub fn yield_device(&mut self, seq: u64, now: Nanos) -> Vec<u64> {
        let lifted = !self.bound_holds(now);
        let Some(e) = self.ios.get_mut(&seq) else {
            return Vec::new();
        };
        if e.class == Criticality::Critical || e.location != Location::Device || lifted {
            return Vec::new();
        }
        self.held += now.saturating_sub(e.entered);
        self.in_device -= 1;
        if std::mem::take(&mut e.bounded) {
            self.noncritical_in_device -= 1;
        }
        self.enqueue(seq, now);
        self.dispatch(now)
    }

    /// A critical task depends on this I/O: reclassify it as critical where
    /// it waits (admission or queue); at the device it only has to finish.
    pub fn promote(&mut self, seq: u64, now: Nanos) -> Vec<u64> {
        let Some(e) = self.ios.get_mut(&seq) else {
            return Vec::new();
        };
        if e.class == Criticality::Critical {
            return Vec::new();
        }
        e.class = Criticality::Critical;
        self.promotions += 1;
        self.last_critical = Some(now);
        let (location, pool, job) = (e.location, e.pool, e.job);
        match location {
            Location::Admission if pool == NONCRIT => {
                self.admission[NONCRIT].retain(|&s| s != seq);
                let e = self.ios.get_mut(&seq).expect("present");
                e.pool = CRIT;
                if self.admitted[CRIT] < self.capacity[CRIT] {
                    self.admit(seq, now);
                } else {
                    self.admission[CRIT].push_back(seq);
                }
            }
            Location::Queued if self.queue_of(Criticality::NonCritical) == NONCRIT => {
                self.ghosts.insert(seq);
                self.queues[CRIT].push(job, now);
            }
            _ => {}
        }
        self.dispatch(now)
    }

    pub fn location(&self, seq: u64) -> Option<Location> {
        self.ios.get(&seq).map(|e| e.location)
    }

    /// When the I/O entered the device, if it is there: when the device
    /// starts on it, whenever the thread that issued it wakes to do it.
    pub fn entered(&self, seq: u64) -> Option<Nanos> {
        self.ios
            .get(&seq)
            .filter(|e| e.location == Location::Device)
            .map(|e| e.entered)
    }

    pub fn class(&self, seq: u64) -> Option<Criticality> {
        self.ios.get(&seq).map(|e| e.class)
    }

    /// Nanoseconds I/Os have spent in the device, each from its dispatch
    /// to its completion (or, in pieces, each piece's), summed.
    pub fn held(&self) -> Nanos {
        self.held
    }

    pub fn outstanding(&self) -> usize {
        self.ios.len()
    }

    pub fn occupancy(&self) -> Occupancy {
        Occupancy {
            admitted: self.admitted,
            waiting_admission: [self.admission[CRIT].len(), self.admission[NONCRIT].len()],
            queued: [self.queues[CRIT].len(), self.live_noncritical()],
            in_device: self.in_device,
            noncritical_in_device: self.noncritical_in_device,
            promotions: self.promotions,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::policy::fifo::Fifo;
    use sluice_core::Ctx;

    const MS: u64 = 1_000_000;

    fn sched(config: RcpConfig, depth: usize) -> Sched {
        Sched::new(config, depth, [Box::new(Fifo::default()), Box::new(Fifo::default())])
    }

    fn job(seq: u64) -> Job {
        Job::new(seq, Ctx::new(seq, 0), 0, 0)
    }

    use Criticality::{Critical as C, NonCritical as N};

    /// RCP's bound, which never lifts.
    fn held() -> RcpConfig {
        RcpConfig {
            critical_idle_ms: 0.0,
            ..RcpConfig::default()
        }
    }

    #[test]
    fn critical_goes_first_and_noncritical_is_bounded_at_the_device() {
        let mut s = sched(held(), 4);
        assert_eq!(s.submit(job(1), N, 0), vec![1]);
        assert_eq!(s.submit(job(2), N, 0), Vec::<u64>::new(), "bound of one non-critical");
        assert_eq!(s.submit(job(3), C, 0), vec![3]);
        assert_eq!(s.complete(1, MS), vec![2]);
        assert_eq!(s.occupancy().in_device, 2);
    }

    #[test]
    fn starvation_guard_serves_noncritical_every_interval() {
        let mut s = sched(RcpConfig::default(), 1);
        s.submit(job(1), C, 0);
        s.submit(job(2), N, 0);
        s.submit(job(3), C, 0);
        assert_eq!(s.complete(1, MS), vec![3], "critical first within the interval");
        assert_eq!(s.submit(job(4), C, MS), Vec::<u64>::new());
        assert_eq!(s.complete(3, 10 * MS), vec![2], "10 ms without a non-critical dispatch");
    }

    #[test]
    fn split_pools_keep_critical_admission_free() {
        let config = RcpConfig {
            critical_slots: 1,
            noncritical_slots: 1,
            ..RcpConfig::default()
        };
        let mut s = sched(config, 1);
        s.submit(job(1), N, 0);
        s.submit(job(2), N, 0);
        assert_eq!(s.location(2), Some(Location::Admission));
        s.submit(job(3), C, 0);
        assert_eq!(s.location(3), Some(Location::Queued), "its own pool has room");
        // Promotion moves 2 to the critical pool's waiting line.
        s.promote(2, 0);
        assert_eq!(s.occupancy().waiting_admission, [1, 0]);
        assert_eq!(s.complete(1, MS), vec![3]);
        assert_eq!(s.complete(3, MS), vec![2]);
        assert_eq!(s.occupancy().promotions, 1);
    }

    #[test]
    fn promotion_from_the_queue_jumps_ahead_and_runs_once() {
        let mut s = sched(RcpConfig::default(), 1);
        s.submit(job(1), C, 0);
        for seq in 2..5 {
            s.submit(job(seq), N, 0);
        }
        s.submit(job(5), C, 0);
        s.promote(4, 0);
        assert_eq!(s.complete(1, MS), vec![5]);
        assert_eq!(s.complete(5, MS), vec![4], "promoted behind earlier critical work");
        assert_eq!(s.complete(4, MS), vec![2]);
        assert_eq!(s.complete(2, MS), vec![3]);
        assert_eq!(s.complete(3, MS), Vec::<u64>::new());
        assert_eq!(s.outstanding(), 0);
    }

    #[test]
    fn a_yielding_noncritical_io_lets_critical_io_in_first() {
        let mut s = sched(RcpConfig::default(), 1);
        assert_eq!(s.submit(job(1), N, 0), vec![1]);
        s.submit(job(2), C, 0);
        assert_eq!(s.yield_device(1, MS), vec![2], "the critical I/O that waited");
        assert_eq!(s.location(1), Some(Location::Queued));
        assert_eq!(s.complete(2, MS), vec![1], "back for its next piece");
        assert_eq!(s.yield_device(1, MS), vec![1], "nothing waits: it goes on");
        s.submit(job(3), C, MS);
        s.promote(1, MS);
        assert_eq!(s.yield_device(1, MS), Vec::<u64>::new(), "promoted: keeps the device");
        assert_eq!(s.location(1), Some(Location::Device));
        assert_eq!(s.complete(1, 2 * MS), vec![3]);
        assert_eq!(s.complete(3, 2 * MS), Vec::<u64>::new());
        assert_eq!(s.outstanding(), 0);
    }

    #[test]
    fn the_bound_lifts_while_no_critical_io_is_expected() {
        let mut s = sched(RcpConfig::default(), 4);
        assert_eq!(s.submit(job(1), C, 0), vec![1]);
        assert_eq!(s.submit(job(2), N, 0), vec![2], "the bound of one");
        assert_eq!(s.submit(job(3), N, 0), Vec::<u64>::new(), "critical I/O in the device");
        assert_eq!(
            s.complete(1, MS),
            Vec::<u64>::new(),
            "critical I/O just finished: expected"
        );
        // 2 ms after the last critical I/O finished, the bound lifts.
        assert_eq!(s.complete(2, 3 * MS), vec![3]);
        assert_eq!(s.submit(job(4), N, 3 * MS), vec![4]);
        assert_eq!(s.submit(job(5), N, 3 * MS), vec![5]);
        assert_eq!(s.occupancy().noncritical_in_device, 3);
        // A critical I/O closes it: it enters at the first free place, and no
        // non-critical I/O enters until it is done and expected no more.
        assert_eq!(s.submit(job(6), C, 3 * MS), vec![6], "the device had room");
        assert_eq!(s.submit(job(7), N, 3 * MS), Vec::<u64>::new());
        assert_eq!(s.complete(3, 4 * MS), Vec::<u64>::new(), "two non-critical I/Os inside");
        assert_eq!(s.complete(6, 4 * MS), Vec::<u64>::new(), "critical I/O just finished");
        assert_eq!(s.complete(4, 7 * MS), vec![7], "2 ms on, it lifts again");
    }

    #[test]
    fn pieces_keep_the_device_while_the_bound_is_lifted_and_yield_once_it_closes() {
        let mut s = sched(RcpConfig::default(), 1);
        assert_eq!(s.submit(job(1), N, 10 * MS), vec![1], "no critical I/O for long");
        s.submit(job(2), N, 10 * MS);
        assert_eq!(s.yield_device(1, 11 * MS), Vec::<u64>::new(), "lifted: goes on");
        assert_eq!(s.location(1), Some(Location::Device));
        s.submit(job(3), C, 11 * MS);
        assert_eq!(s.yield_device(1, 12 * MS), vec![3], "closed: the critical I/O first");
        assert_eq!(
            s.complete(3, 13 * MS),
            vec![2],
            "the bound of one: 2 had queued before 1"
        );
        assert_eq!(s.complete(2, 14 * MS), vec![1]);
        assert_eq!(s.complete(1, 15 * MS), Vec::<u64>::new());
        assert_eq!(s.outstanding(), 0);
    }

    #[test]
    fn a_lifted_bound_still_caps_what_a_critical_io_may_find_ahead() {
        let mut s = sched(RcpConfig::default(), 32);
        let entered: usize = (1..=12).map(|seq| s.submit(job(seq), N, 0).len()).sum();
        assert_eq!(entered, 8, "noncritical_lifted_bound");
    }

    #[test]
    fn a_critical_io_waits_only_for_what_is_already_in_the_device() {
        let mut s = sched(RcpConfig::default(), 2);
        assert_eq!(s.submit(job(1), N, 0), vec![1]);
        assert_eq!(s.submit(job(2), N, 0), vec![2], "lifted: no critical I/O yet");
        s.submit(job(3), N, 0);
        s.submit(job(4), C, 0);
        assert_eq!(s.complete(1, MS), vec![4], "ahead of the non-critical I/O queued");
        assert_eq!(s.complete(2, MS), vec![3], "back to the bound of one");
        assert_eq!(s.submit(job(5), N, MS), Vec::<u64>::new());
    }

    #[test]
    fn disabled_rcp_is_one_fifo_path() {
        let mut s = sched(RcpConfig::off(), 1);
        s.submit(job(1), N, 0);
        s.submit(job(2), N, 0);
        s.submit(job(3), C, 0);
        assert_eq!(s.complete(1, MS), vec![2]);
        assert_eq!(s.complete(2, MS), vec![3]);
    }

    #[test]
    fn seek_aware_policies_decide_from_where_the_last_dispatch_left_the_head() {
        use sluice_core::device::{DeviceProfile, SeekDiskProfile};
        use sluice_core::policy::sstf::Sstf;
        let view = DeviceProfile::SeekDisk(SeekDiskProfile::default())
            .dispatch_view()
            .unwrap();
        let mut s = Sched::new(
            RcpConfig::default(),
            1,
            [Box::new(Sstf::default()), Box::new(Sstf::default())],
        )
        .with_view(view);
        let at = |seq: u64, cylinder: u64, s: &Sched| Job::new(seq, Ctx::new(seq, 0), s.position(cylinder << 20), 0);
        assert_eq!(s.submit(at(1, 500, &s), C, 0), vec![1], "the head moves to 500");
        for (seq, cylinder) in [(2, 0), (3, 900), (4, 520)] {
            let job = at(seq, cylinder, &s);
            s.submit(job, C, 0);
        }
        assert_eq!(s.complete(1, MS), vec![4], "nearest to 500");
        assert_eq!(s.complete(4, 2 * MS), vec![3], "nearest to 520: 900, not 0");
        assert_eq!(s.complete(3, 3 * MS), vec![2]);
    }

    #[test]
    fn held_sums_each_io_s_time_in_the_device_piece_by_piece() {
        let mut s = sched(RcpConfig::default(), 1);
        assert_eq!(s.submit(job(1), C, MS), vec![1]);
        s.submit(job(2), N, MS);
        assert_eq!(s.complete(1, 3 * MS), vec![2], "1 held the device 2 ms");
        assert_eq!(s.yield_device(2, 4 * MS), vec![2], "a piece of 1 ms, then back in");
        s.complete(2, 6 * MS);
        assert_eq!(s.held(), 5 * MS);
    }
}
