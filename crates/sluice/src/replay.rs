//! `sluice replay`: decides a controller's recorded run again
//! (`sluice_sim::replay`) and says whether every decision came out the
//! same.

use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use sluice_core::controller::trace::Divergence;
use sluice_sim::replay::Trace;

/// Decide a controller's recorded run again and check every decision
#[derive(Args)]
#[command(
    long_about = "Decide a controller's recorded run again and check every decision.\n\n\
    A trace is what `trace_file` in the proxy's [postgres.background] section writes: one \
    JSON line with the settings of the checkpoint controller (and of the vacuum controller, if \
    [postgres.background.vacuum] was set), then one line per interval with what the proxy \
    observed (foreground rate, WAL since the redo point, whether a checkpoint ran, time since \
    it started, the vacuums running), what the controllers decided, and whether it reached \
    PostgreSQL. The replay gives the same observations to new controllers of the same \
    settings, in virtual time, and fails at the first interval where they decide otherwise.\n\n\
    Example: sluice replay /var/lib/sluice/checkpoints.trace"
)]
pub struct ReplayArgs {
    /// The trace file
    trace: PathBuf,
}

pub fn run(args: ReplayArgs) -> Result<()> {
    let file = File::open(&args.trace).with_context(|| format!("cannot open {}", args.trace.display()))?;
    let trace = Trace::read(BufReader::new(file)).map_err(|e| anyhow::anyhow!("{}: {e}", args.trace.display()))?;
    match trace.replay() {
        Ok(done) => {
            println!(
                "{}: {} intervals, {} decisions, every one decided again the same",
                args.trace.display(),
                done.steps,
                done.decisions
            );
            Ok(())
        }
        Err(Divergence::Settings(e)) => bail!("{}: the trace's settings are refused: {e}", args.trace.display()),
        Err(Divergence::Unmatched { step }) => bail!(
            "{}: interval {step} (line {}) does not match the header: a vacuum observation must be \
             in every step if the header has vacuum settings, and in none if it has not",
            args.trace.display(),
            step + 2
        ),
        Err(Divergence::Step {
            step,
            recorded,
            replayed,
        }) => {
            let show = |ds: &[sluice_core::controller::trace::TracedDecision]| {
                if ds.is_empty() {
                    "  (nothing)".to_string()
                } else {
                    ds.iter()
                        .map(|d| format!("  {} = {} ({})", d.knob, d.value, d.why))
                        .collect::<Vec<_>>()
                        .join("\n")
                }
            };
            bail!(
                "{}: interval {} (line {}) decided otherwise.\nrecorded:\n{}\nreplayed:\n{}",
                args.trace.display(),
                step,
                step + 2,
                show(&recorded),
                show(&replayed)
            )
        }
    }
}
