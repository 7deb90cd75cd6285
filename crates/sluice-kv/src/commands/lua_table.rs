//! What the scripts' serialisers (`cjson`, `cmsgpack`) ask of a Lua table:
//! its entries, and whether it is a sequence, keys exactly 1..n, which
//! both write as an array.

use mlua::{Table, Value};

/// A table's entries, in the order `pairs` gives them, and whether their
/// keys are exactly 1..n (true for the empty table).
pub(super) struct Entries {
    pub pairs: Vec<(Value, Value)>,
    pub sequence: bool,
}

pub(super) fn entries(t: &Table) -> mlua::Result<Entries> {
    let mut pairs = Vec::new();
    for pair in t.pairs::<Value, Value>() {
        pairs.push(pair?);
    }
    let n = pairs.len() as f64;
    // n distinct keys, each an integer in 1..=n: they are 1..n.
    let sequence = pairs.iter().all(|(key, _)| {
        let position = match key {
            Value::Integer(i) => *i as f64,
            Value::Number(x) => *x,
            _ => return false,
        };
        position.fract() == 0.0 && (1.0..=n).contains(&position)
    });
    Ok(Entries { pairs, sequence })
}
