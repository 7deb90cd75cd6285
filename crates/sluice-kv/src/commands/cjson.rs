//! `cjson`, the JSON library Redis gives Lua scripts (lua-cjson's
//! `encode`, `decode` and `null`): queues and rate limiters keep their
//! state as JSON and read and write it inside a script. The JSON itself is
//! serde_json's; what is written here is lua-cjson's mapping between Lua
//! values and JSON, which no crate has:
//!
//! - a table whose keys are exactly 1..n is an array, any other table an
//!   object (its number keys written as strings), and an empty table `{}`;
//! - a number is written as an integer when it is one (within ±2^53), and
//!   NaN and the infinities are refused, as lua-cjson refuses them;
//! - `null` decodes to `cjson.null` (a null light userdata), which encodes
//!   back to `null`;
//! - tables nested deeper than 1000 are refused, as lua-cjson's default.
//!
//! Departures: a number that is not an integer is written in its shortest
//! form that reads back exactly (lua-cjson writes 14 significant digits);
//! a string that is not UTF-8 is written with its invalid bytes replaced
//! (lua-cjson passes them through, writing JSON that is not UTF-8 either);
//! JSON nested deeper than 128 does not decode (serde_json's bound, where
//! lua-cjson's is 1000).
//!
//! ```text
//! EVAL "return cjson.encode({name = 'ada', tags = {1, 2}})" 0   -> {"name":"ada","tags":[1,2]}
//! EVAL "return cjson.decode(ARGV[1]).n + 1" 0 '{"n": 41}'       -> 42
//! ```

use mlua::{Lua, Table, Value};
use serde_json::{Map, Number, Value as Json};

use super::lua_table::{entries, Entries};

/// Deepest nesting of tables or JSON containers (lua-cjson's default).
const MAX_DEPTH: usize = 1000;

/// Numbers up to this magnitude are written as integers when integral:
/// above it, a double no longer holds every integer.
const EXACT_INTEGERS: f64 = 9_007_199_254_740_992.0;

/// The `cjson` table: `encode`, `decode` and `null`.
pub(super) fn library(lua: &Lua) -> mlua::Result<Table> {
    let cjson = lua.create_table()?;
    cjson.set(
        "encode",
        lua.create_function(|_, value: Value| {
            let json = to_json(&value, 0)?;
            serde_json::to_string(&json).map_err(mlua::Error::external)
        })?,
    )?;
    cjson.set(
        "decode",
        lua.create_function(|lua, text: mlua::String| {
            let json: Json = serde_json::from_slice(&text.as_bytes())
                .map_err(|e| mlua::Error::runtime(format!("Expected a JSON value: {e}")))?;
            to_lua(lua, json)
        })?,
    )?;
    cjson.set("null", Value::NULL)?;
    Ok(cjson)
}

fn too_deep() -> mlua::Error {
    mlua::Error::runtime(format!("Cannot serialise, excessive nesting ({})", MAX_DEPTH + 1))
}

fn to_json(value: &Value, depth: usize) -> mlua::Result<Json> {
    Ok(match value {
        Value::Nil => Json::Null,
        Value::LightUserData(p) if p.0.is_null() => Json::Null,
        Value::Boolean(b) => Json::Bool(*b),
        Value::Integer(i) => Json::from(*i),
        Value::Number(n) => number(*n)?,
        Value::String(s) => Json::String(String::from_utf8_lossy(&s.as_bytes()).into_owned()),
        Value::Table(_) if depth >= MAX_DEPTH => return Err(too_deep()),
        Value::Table(t) => table(t, depth + 1)?,
        other => {
            return Err(mlua::Error::runtime(format!(
                "Cannot serialise {}: type not supported",
                other.type_name()
            )))
        }
    })
}

fn number(n: f64) -> mlua::Result<Json> {
    if n.fract() == 0.0 && n.abs() <= EXACT_INTEGERS {
        return Ok(Json::from(n as i64));
    }
    Number::from_f64(n)
        .map(Json::Number)
        .ok_or_else(|| mlua::Error::runtime("Cannot serialise number: must not be NaN or Inf"))
}

/// An array if the keys are exactly 1..n (n ≥ 1), else an object.
fn table(t: &Table, depth: usize) -> mlua::Result<Json> {
    let Entries { pairs, sequence } = entries(t)?;
    if !sequence || pairs.is_empty() {
        return object(&pairs, depth);
    }
    let items: mlua::Result<Vec<Json>> = (1..=pairs.len())
        .map(|i| to_json(&t.raw_get::<Value>(i)?, depth))
        .collect();
    Ok(Json::Array(items?))
}

fn object(pairs: &[(Value, Value)], depth: usize) -> mlua::Result<Json> {
    let mut map = Map::new();
    for (key, value) in pairs {
        let key = match key {
            Value::String(s) => String::from_utf8_lossy(&s.as_bytes()).into_owned(),
            Value::Integer(i) => i.to_string(),
            Value::Number(n) => number(*n)?.to_string(),
            other => {
                return Err(mlua::Error::runtime(format!(
                    "Cannot serialise table: key of type {} not supported",
                    other.type_name()
                )))
            }
        };
        map.insert(key, to_json(value, depth)?);
    }
    Ok(Json::Object(map))
}

fn to_lua(lua: &Lua, json: Json) -> mlua::Result<Value> {
    Ok(match json {
        Json::Null => Value::NULL,
        Json::Bool(b) => Value::Boolean(b),
        Json::Number(n) => Value::Number(n.as_f64().unwrap_or(f64::NAN)),
        Json::String(s) => Value::String(lua.create_string(&s)?),
        Json::Array(items) => {
            let items: Vec<Value> = items
                .into_iter()
                .map(|item| to_lua(lua, item))
                .collect::<mlua::Result<_>>()?;
            Value::Table(lua.create_sequence_from(items)?)
        }
        Json::Object(map) => {
            let pairs: Vec<(String, Value)> = map
                .into_iter()
                .map(|(key, value)| Ok((key, to_lua(lua, value)?)))
                .collect::<mlua::Result<_>>()?;
            Value::Table(lua.create_table_from(pairs)?)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(lua: &Lua, script: &str) -> String {
        lua.load(script).eval::<String>().unwrap()
    }

    fn lua() -> Lua {
        let lua = Lua::new();
        lua.globals().set("cjson", library(&lua).unwrap()).unwrap();
        lua
    }

    #[test]
    fn tables_encode_as_lua_cjson_maps_them() {
        let lua = lua();
        assert_eq!(run(&lua, "return cjson.encode({1, 2, 'x'})"), r#"[1,2,"x"]"#);
        assert_eq!(run(&lua, "return cjson.encode({a = 1.5})"), r#"{"a":1.5}"#);
        assert_eq!(run(&lua, "return cjson.encode({})"), "{}");
        assert_eq!(
            run(&lua, "return cjson.encode({[1] = 'a', [3] = 'c'})"),
            r#"{"1":"a","3":"c"}"#
        );
        assert_eq!(run(&lua, "return cjson.encode(cjson.null)"), "null");
        assert_eq!(run(&lua, "return cjson.encode('a\"b')"), r#""a\"b""#);
        assert_eq!(run(&lua, "return cjson.encode(2^53)"), "9007199254740992");
    }

    #[test]
    fn decode_gives_back_what_encode_wrote() {
        let lua = lua();
        let back = "local t = cjson.decode('{\"n\":41,\"list\":[true,null,\"s\"]}') \
                    return tostring(t.n + 1) .. ' ' .. tostring(t.list[1]) .. ' ' \
                    .. tostring(t.list[2] == cjson.null) .. ' ' .. t.list[3]";
        assert_eq!(run(&lua, back), "42 true true s");
        assert_eq!(
            run(&lua, "return cjson.encode(cjson.decode('[1,[2,{\"a\":[]}]]'))"),
            r#"[1,[2,{"a":{}}]]"#,
            "an empty array comes back an empty table, which lua-cjson writes {{}}"
        );
    }

    #[test]
    fn what_json_cannot_hold_is_refused_by_name() {
        let lua = lua();
        let refused = |script: &str| lua.load(script).exec().unwrap_err().to_string();
        assert!(refused("cjson.encode(0/0)").contains("NaN or Inf"));
        assert!(refused("cjson.encode(print)").contains("type not supported"));
        assert!(refused("local t = {} t.self = t cjson.encode(t)").contains("excessive nesting"));
        assert!(refused("cjson.decode('{')").contains("Expected a JSON value"));
        let deep = format!("cjson.decode('{}')", "[".repeat(1100));
        assert!(refused(&deep).contains("recursion limit"));
    }
}
