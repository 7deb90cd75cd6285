//! Runtime configuration: the device and RCP's layers, each switchable for
//! ablation (RCP §7.5). TOML, every field defaulted:
//!
//! ```toml
//! [device]
//! kind = "emulated"          # "buffered", "direct" (O_DIRECT) or "emulated"
//! depth = 32                 # the device's internal queue (NCQ-like)
//! [device.profile]           # the timing model of an emulated device
//! model = "ssd"              # "seek-disk", "ssd" or "cloud-volume"
//! channels = 4
//!
//! [rcp]
//! enabled = true             # false: one FIFO path, no notion of criticality
//! dirty_budget_mb = 256      # memory for buffered writes not yet written back
//! critical_dirty_ratio = 0.20    # critical writers write back above this share
//! noncritical_dirty_ratio = 0.01 # non-critical writers above this one (§4.3)
//! split_dirty = true         # false: every writer gets the critical ratio
//! split_admission = true     # separate slot pools per class (§4.3)
//! critical_slots = 128
//! noncritical_slots = 128
//! two_queues = true          # critical first at dispatch (§4.3)
//! policy = "fifo"            # order within each queue: any sluice-core policy
//! think_ms = 0.0             # deadline policies: K̄, a request's processing time between its I/Os
//! # avg_access_ms = 9.5      # deadline policies: C̄; default: the seek disk's, else 0
//! starvation_ms = 10.0       # at least one non-critical I/O per this interval
//! noncritical_device_bound = 1   # non-critical I/Os at the device; 0 = unbounded
//! critical_idle_ms = 2.0     # the bound lifts after this long with no critical I/O; 0 = it never lifts
//! noncritical_lifted_bound = 8   # non-critical I/Os at the device while it is lifted; 0 = unbounded
//! noncritical_piece_kb = 64  # a larger non-critical I/O holds the device a piece at a time; 0 = whole
//! inheritance = true         # locks, condition variables, I/O dependencies (§4.2)
//! [rcp.options]              # the policy's tunables (sluice-core's PolicyOptions)
//! coop = { starvation_ms = 100.0 }
//! cfq = { slice_ms = 100.0, idle_ms = 8.0 }
//! ```

use serde::{Deserialize, Serialize};
use sluice_core::budget::SlackModel;
use sluice_core::device::DeviceProfile;
use sluice_core::time::from_ms;
use sluice_core::{Nanos, PolicyOptions, PolicySpec};

use crate::error::IoError;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceKind {
    /// A real file through the page cache.
    #[default]
    Buffered,
    /// A real file opened with O_DIRECT: aligned buffers, offsets and lengths.
    Direct,
    /// A real file whose completions are held until the timing model says
    /// the device would have finished.
    Emulated,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeviceConfig {
    pub kind: DeviceKind,
    /// I/Os the device accepts at once (its internal queue).
    pub depth: usize,
    /// Timing model; required for `emulated`, refused otherwise.
    pub profile: Option<DeviceProfile>,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        DeviceConfig {
            kind: DeviceKind::Buffered,
            depth: 32,
            profile: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RcpConfig {
    pub enabled: bool,
    pub dirty_budget_mb: f64,
    pub critical_dirty_ratio: f64,
    pub noncritical_dirty_ratio: f64,
    pub split_dirty: bool,
    pub split_admission: bool,
    pub critical_slots: usize,
    pub noncritical_slots: usize,
    pub two_queues: bool,
    pub policy: String,
    pub starvation_ms: f64,
    pub noncritical_device_bound: usize,
    /// The device bound lifts after this long with no critical I/O waiting,
    /// in the device, arriving or finishing (see `sched`); 0 = never.
    pub critical_idle_ms: f64,
    /// The bound while lifted: what a critical I/O that arrives then may
    /// find ahead of it, one piece each (0 = the device's depth).
    pub noncritical_lifted_bound: usize,
    /// Largest piece, KiB, in which a non-critical I/O holds the device: a
    /// larger one gives the device back between pieces, so critical I/O
    /// waits behind at most one piece (0 = whole I/Os).
    pub noncritical_piece_kb: u64,
    pub inheritance: bool,
    /// K̄ of TraQIOS's slack (§3.2.2): the mean processing time a request
    /// spends between two of its I/Os, ms.
    pub think_ms: f64,
    /// C̄ of TraQIOS's slack, ms; `None`: the emulated seek disk's average
    /// access time, and 0 on other devices (set it there for `traqios`).
    pub avg_access_ms: Option<f64>,
    /// Tunables of `policy`; each defaults to its paper's value.
    pub options: PolicyOptions,
}

impl Default for RcpConfig {
    fn default() -> Self {
        RcpConfig {
            enabled: true,
            dirty_budget_mb: 256.0,
            critical_dirty_ratio: 0.20,
            noncritical_dirty_ratio: 0.01,
            split_dirty: true,
            split_admission: true,
            critical_slots: 128,
            noncritical_slots: 128,
            two_queues: true,
            policy: "fifo".into(),
            starvation_ms: 10.0,
            noncritical_device_bound: 1,
            critical_idle_ms: 2.0,
            noncritical_lifted_bound: 8,
            noncritical_piece_kb: 64,
            inheritance: true,
            think_ms: 0.0,
            avg_access_ms: None,
            options: PolicyOptions::default(),
        }
    }
}

impl RcpConfig {
    /// No prioritization anywhere: the FIFO baseline.
    pub fn off() -> Self {
        RcpConfig {
            enabled: false,
            ..RcpConfig::default()
        }
    }

    pub fn starvation(&self) -> Nanos {
        from_ms(self.starvation_ms)
    }

    /// How long after the last critical I/O the device bound lifts;
    /// `None`: it never does.
    pub fn critical_idle(&self) -> Option<Nanos> {
        (self.critical_idle_ms > 0.0).then(|| from_ms(self.critical_idle_ms))
    }

    pub fn policy_spec(&self) -> Result<PolicySpec, IoError> {
        self.policy
            .parse()
            .map_err(|e| IoError::Config(format!("rcp.policy: {e}")))
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeConfig {
    pub device: DeviceConfig,
    pub rcp: RcpConfig,
}

impl RuntimeConfig {
    /// The estimates deadline policies compute slack with (`think_ms`,
    /// `avg_access_ms` or the device's C̄).
    pub fn slack_model(&self) -> Result<SlackModel, IoError> {
        let device = match &self.device.profile {
            Some(p) => p
                .avg_access()
                .map_err(|e| IoError::Config(format!("device.profile: {e}")))?,
            None => None,
        };
        let avg_cost = match self.rcp.avg_access_ms {
            Some(ms) => from_ms(ms),
            None => device.unwrap_or(0),
        };
        Ok(SlackModel {
            avg_cost,
            think: from_ms(self.rcp.think_ms),
        })
    }

    pub fn from_toml(text: &str) -> Result<Self, IoError> {
        let config: RuntimeConfig = toml::from_str(text).map_err(|e| IoError::Config(e.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    pub fn validate(&self) -> Result<(), IoError> {
        let bad = |m: &str| Err(IoError::Config(m.to_string()));
        if self.device.depth == 0 {
            return bad("device.depth must be at least 1");
        }
        match (self.device.kind, &self.device.profile) {
            (DeviceKind::Emulated, None) => return bad("device.profile is required for kind = \"emulated\""),
            (DeviceKind::Buffered | DeviceKind::Direct, Some(_)) => {
                return bad("device.profile applies only to kind = \"emulated\"")
            }
            _ => {}
        }
        let r = &self.rcp;
        if r.critical_slots == 0 || r.noncritical_slots == 0 {
            return bad("rcp.critical_slots and rcp.noncritical_slots must be at least 1");
        }
        if !(r.dirty_budget_mb.is_finite() && r.dirty_budget_mb >= 0.0) {
            return bad("rcp.dirty_budget_mb must be a finite number >= 0");
        }
        for (field, v) in [
            ("rcp.critical_dirty_ratio", r.critical_dirty_ratio),
            ("rcp.noncritical_dirty_ratio", r.noncritical_dirty_ratio),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(IoError::Config(format!("{field} must lie in [0, 1], got {v}")));
            }
        }
        if !(r.starvation_ms.is_finite() && r.starvation_ms > 0.0) {
            return bad("rcp.starvation_ms must be a finite number > 0");
        }
        if !(r.critical_idle_ms.is_finite() && r.critical_idle_ms >= 0.0) {
            return bad("rcp.critical_idle_ms must be a finite number >= 0");
        }
        if !(r.think_ms.is_finite() && r.think_ms >= 0.0) {
            return bad("rcp.think_ms must be a finite number >= 0");
        }
        if r.avg_access_ms.is_some_and(|ms| !(ms.is_finite() && ms > 0.0)) {
            return bad("rcp.avg_access_ms must be a finite number > 0");
        }
        r.options
            .validate()
            .map_err(|e| IoError::Config(format!("rcp.options: {e}")))?;
        r.policy_spec().map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_options_are_read_and_checked() {
        let c =
            RuntimeConfig::from_toml("[rcp]\npolicy = \"coop\"\n[rcp.options]\ncoop = { starvation_ms = 1000.0 }\n")
                .unwrap();
        assert_eq!(c.rcp.options.coop.starvation_ms, 1000.0);
        let e = RuntimeConfig::from_toml("[rcp.options]\ncop = { starvation_ms = 1.0 }\n").unwrap_err();
        assert!(e.to_string().contains("unknown field `cop`"), "{e}");
    }

    #[test]
    fn documented_example_parses() {
        let doc = include_str!("config.rs")
            .lines()
            .take_while(|l| l.starts_with("//!"))
            .filter_map(|l| l.strip_prefix("//! "))
            .skip_while(|l| !l.starts_with("```toml"))
            .skip(1)
            .take_while(|l| !l.starts_with("```"))
            .collect::<Vec<_>>()
            .join("\n");
        let c = RuntimeConfig::from_toml(&doc).unwrap();
        assert_eq!((c.device.kind, c.device.depth), (DeviceKind::Emulated, 32));
    }

    #[test]
    fn slack_estimates_come_from_the_seek_disk_unless_given() {
        let disk = "[device]\nkind = \"emulated\"\n[device.profile]\nmodel = \"seek-disk\"\n";
        let c = RuntimeConfig::from_toml(disk).unwrap();
        let m = c.slack_model().unwrap();
        assert!((m.avg_cost as f64 / 1e6 - 9.477).abs() < 0.01, "{m:?}");
        let c = RuntimeConfig::from_toml(&format!("[rcp]\nthink_ms = 0.5\navg_access_ms = 2.0\n{disk}")).unwrap();
        assert_eq!(
            c.slack_model().unwrap(),
            SlackModel {
                avg_cost: 2_000_000,
                think: 500_000
            }
        );
        let m = RuntimeConfig::default().slack_model().unwrap();
        assert_eq!(m.avg_cost, 0, "no seek disk: 0 unless set");
    }

    #[test]
    fn bad_configurations_name_the_field() {
        for (text, field) in [
            ("[device]\ndepth = 0", "device.depth"),
            ("[device]\nkind = \"emulated\"", "device.profile"),
            ("[rcp]\npolicy = \"nope\"", "rcp.policy"),
            ("[rcp]\nstarvation_ms = -1.0", "rcp.starvation_ms"),
            ("[rcp]\nslots = 3", "slots"),
            ("[rcp]\nnoncritical_dirty_ratio = 2.0", "rcp.noncritical_dirty_ratio"),
            ("[rcp]\nthink_ms = -1.0", "rcp.think_ms"),
            ("[rcp]\navg_access_ms = 0.0", "rcp.avg_access_ms"),
        ] {
            let err = RuntimeConfig::from_toml(text).unwrap_err().to_string();
            assert!(err.contains(field), "{text}: {err}");
        }
    }
}
