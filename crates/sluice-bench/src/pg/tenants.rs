//! The tenants of `--tenants NAME:WEIGHT[:USERS]` and how a run's users
//! are split among them.

use anyhow::{anyhow, bail, ensure, Context, Result};

/// A tenant of `--tenants`: its weight and, if given, its own user count.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct WeightedTenant {
    pub name: String,
    pub weight: f64,
    pub users: Option<usize>,
}

impl WeightedTenant {
    pub fn parse(spec: &str) -> Result<WeightedTenant> {
        let mut parts = spec.split(':');
        let (Some(name), Some(weight)) = (parts.next(), parts.next()) else {
            bail!("--tenants wants NAME:WEIGHT[:USERS], got `{spec}`");
        };
        let weight: f64 = weight
            .parse()
            .with_context(|| format!("tenant `{name}`: bad weight `{weight}`"))?;
        ensure!(
            weight.is_finite() && weight > 0.0,
            "tenant `{name}`: weight must be > 0, got {weight}"
        );
        let users = parts
            .next()
            .map(|u| match u.parse::<usize>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(anyhow!("tenant `{name}`: users must be a whole number > 0, got `{u}`")),
            })
            .transpose()?;
        ensure!(
            parts.next().is_none(),
            "--tenants wants NAME:WEIGHT[:USERS], got `{spec}`"
        );
        Ok(WeightedTenant {
            name: name.to_string(),
            weight,
            users,
        })
    }
}

/// The pgbench groups of a run as (application_name, weight, users): one
/// unnamed group without tenants; else each tenant with its own user count
/// or an even share of what the others leave of `users`.
pub(crate) fn user_split(tenants: &[WeightedTenant], users: usize) -> Result<Vec<(Option<String>, f64, usize)>> {
    if tenants.is_empty() {
        return Ok(vec![(None, 1.0, users)]);
    }
    let fixed: usize = tenants.iter().filter_map(|t| t.users).sum();
    let even = tenants.iter().filter(|t| t.users.is_none()).count();
    ensure!(
        even == 0 || fixed < users,
        "--users {users}: the tenants with a user count take {fixed}, none left for the others"
    );
    let rest = users.saturating_sub(fixed) / even.max(1);
    Ok(tenants
        .iter()
        .map(|t| (Some(t.name.clone()), t.weight, t.users.unwrap_or(rest.max(1))))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenants_take_their_own_user_count_or_an_even_share() {
        let ls = WeightedTenant::parse("ls:1:10").unwrap();
        assert_eq!(ls.users, Some(10));
        let be = WeightedTenant::parse("be:9").unwrap();
        let split = user_split(&[ls.clone(), be], 100).unwrap();
        let users: Vec<usize> = split.iter().map(|g| g.2).collect();
        assert_eq!(users, [10, 90]);
        assert!(
            user_split(&[ls, WeightedTenant::parse("be:1").unwrap()], 10).is_err(),
            "nothing left for be"
        );
    }

    #[test]
    fn bad_tenants_are_named() {
        for bad in ["ls", "ls:x", "ls:0", "ls:1:0", "ls:1:ten", "ls:1:2:3"] {
            let e = WeightedTenant::parse(bad).unwrap_err().to_string();
            assert!(e.contains("ls") || e.contains("NAME:WEIGHT"), "{bad}: {e}");
        }
    }
}
