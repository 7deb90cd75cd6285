//! The configuration file of `sluice proxy` (issue 5, §7): one TOML file
//! with a section per part — `[proxy]` (listener, upstream, protocol, tenant
//! key), `[admin]` (the HTTP port), `[gate]` (P, ζ, queues, weights) and
//! `[optimizer]` (how P, ζ and SLO weights are tuned). `docs/proxy.example.toml`
//! documents every field. Errors name the file and the field.

use std::path::Path;

use serde::Deserialize;

use crate::config::ProxyConfig;
use crate::gate::GateConfig;
use crate::optimizer::OptimizerConfig;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    pub proxy: ProxyConfig,
    #[serde(default)]
    pub admin: AdminConfig,
    #[serde(default)]
    pub gate: GateConfig,
    #[serde(default)]
    pub optimizer: OptimizerConfig,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Where the admin HTTP port listens; localhost unless told otherwise.
    /// Empty: no admin port.
    pub listen: String,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: "127.0.0.1:9187".into(),
        }
    }
}

impl Settings {
    /// Parses and checks settings from TOML text.
    pub fn parse(text: &str) -> Result<Self, String> {
        let settings: Settings = toml::from_str(text).map_err(|e| e.to_string())?;
        settings.proxy.validate().map_err(|e| format!("[proxy]: {e}"))?;
        settings.gate.validate()?;
        settings.optimizer.validate()?;
        Ok(settings)
    }

    /// Reads and checks the file at `path`.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::optimizer::ParallelismMode;

    const MINIMAL: &str = "[proxy]\nlisten = '127.0.0.1:6432'\nupstream = '127.0.0.1:5432'\nprotocol = 'pg'\n";

    #[test]
    fn a_minimal_file_gets_the_defaults() {
        let s = Settings::parse(MINIMAL).unwrap();
        assert_eq!(s.admin.listen, "127.0.0.1:9187");
        assert_eq!(s.gate.parallelism, 16);
        assert_eq!(s.optimizer.parallelism, ParallelismMode::Model);
    }

    #[test]
    fn the_example_file_parses() {
        let example = include_str!("../../../docs/proxy.example.toml");
        let s = Settings::parse(example).unwrap();
        assert_eq!(s.gate.weights.get("analytics"), Some(&0.5));
        assert_eq!(s.optimizer.slo.len(), 1);
    }

    #[test]
    fn errors_name_the_field() {
        let err = |extra: &str| Settings::parse(&format!("{MINIMAL}{extra}")).unwrap_err();
        assert!(err("[gate]\nparallelism = 0\n").contains("gate.parallelism"));
        assert!(err("[gate]\nparalelism = 4\n").contains("paralelism"));
        assert!(err("[gate.weights]\nbob = -1\n").contains("gate.weights.bob"));
        assert!(err("[optimizer]\nparallelism = 'magic'\n").contains("magic"));
        assert!(err("[[optimizer.slo]]\ntenant = 'a'\npercentile = 100\ntarget_ms = 5\n").contains("percentile"));
        assert!(
            Settings::parse("[proxy]\nlisten = ''\nupstream = 'x:1'\nprotocol = 'redis'\n")
                .unwrap_err()
                .contains("listen")
        );
    }
}
