//! Replays a controller's recorded run (a trace, sluice-core's
//! [`trace`](sluice_core::controller::trace)) in virtual time: the same
//! observations go to a new controller of the same settings, which must
//! decide what the live one decided. `sluice replay TRACE` runs this on a
//! file; a trace is what `trace_file` of the proxy's
//! `[postgres.background]` writes. A trace recorded before a rule changed
//! diverges where the new rule decides otherwise, and the divergence names
//! the first such interval: a replay is how a rule's change is checked
//! against a recorded run.

use std::io::BufRead;

use sluice_core::controller::trace::{replay, Divergence, Replayed, Step, TraceHeader, POSTGRES};

/// A trace read whole: its header and its steps.
#[derive(Debug)]
pub struct Trace {
    pub header: TraceHeader,
    pub steps: Vec<Step>,
}

impl Trace {
    /// Reads JSON lines: the header, then one step per line. Blank lines are
    /// skipped; anything else that is not a step is an error naming its
    /// line. A last line cut short (the driver was killed while writing
    /// it) is an error too: a replay of a partial run should say so.
    pub fn read(input: impl BufRead) -> Result<Trace, String> {
        let mut lines = input
            .lines()
            .enumerate()
            .filter(|(_, l)| !matches!(l, Ok(l) if l.trim().is_empty()));
        let (_, first) = lines.next().ok_or("the trace is empty: it has no header line")?;
        let first = first.map_err(|e| format!("line 1: {e}"))?;
        let header: TraceHeader =
            serde_json::from_str(&first).map_err(|e| format!("line 1 is not a trace header: {e}"))?;
        if header.controller != POSTGRES {
            return Err(format!(
                "line 1: a trace of controller {:?}, and only {POSTGRES:?} can be replayed",
                header.controller
            ));
        }
        let steps = lines
            .map(|(i, line)| {
                let line = line.map_err(|e| format!("line {}: {e}", i + 1))?;
                serde_json::from_str(&line).map_err(|e| format!("line {} is not a step: {e}", i + 1))
            })
            .collect::<Result<_, String>>()?;
        Ok(Trace { header, steps })
    }

    /// Decides every step again.
    pub fn replay(&self) -> Result<Replayed, Divergence> {
        replay(&self.header, &self.steps)
    }
}

#[cfg(test)]
mod tests {
    use sluice_core::controller::{CheckpointController, CheckpointControllerConfig, CheckpointObservation};

    use super::*;

    fn trace_text() -> String {
        let config = CheckpointControllerConfig::default();
        let mut live = CheckpointController::new(config).unwrap();
        let mut text = serde_json::to_string(&TraceHeader::postgres(config, None)).unwrap() + "\n";
        for i in 0..50u64 {
            let observation = CheckpointObservation {
                foreground_rate: if i < 25 { 321.5 } else { 12.25 },
                wal_since_redo: i * 12_345_678,
                checkpoint_running: i % 10 > 6,
                since_checkpoint_start: i * 987_654_321,
                wal_position: None,
                server_trigger_point: None,
            };
            let step = Step::new(observation, None, &live.decide(observation), true);
            text += &(serde_json::to_string(&step).unwrap() + "\n");
        }
        text
    }

    #[test]
    fn a_written_trace_reads_back_and_replays() {
        let trace = Trace::read(trace_text().as_bytes()).unwrap();
        assert_eq!(trace.steps.len(), 50);
        let done = trace.replay().unwrap();
        assert_eq!(done.steps, 50);
        assert!(done.decisions >= 4, "{done:?}");
    }

    #[test]
    fn a_bad_trace_is_named_by_line() {
        let text = trace_text();
        for (bad, want) in [
            (String::new(), "no header line"),
            (
                "{\"controller\":\"postgres\"}\n".to_string(),
                "line 1 is not a trace header",
            ),
            (
                text.replacen("\"postgres\",", "\"compaction\",", 1),
                "only \"postgres\" can be replayed",
            ),
            (text.clone() + "{\"observation\":", "line 52 is not a step"),
            (
                text.replacen("\"applied\":true", "\"applied\":true,\"extra\":1", 1),
                "line 2 is not a step",
            ),
        ] {
            let e = Trace::read(bad.as_bytes()).unwrap_err();
            assert!(e.contains(want), "{e:?} should say {want:?}");
        }
    }
}
