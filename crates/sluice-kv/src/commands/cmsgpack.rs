//! `cmsgpack`, the MessagePack library Redis gives Lua scripts
//! (lua-cmsgpack's `pack` and `unpack`): job queues such as BullMQ keep
//! their jobs' options packed and read them inside their scripts. The wire
//! format is the `rmp` crates' (written with `rmp`, read with `rmpv`);
//! what is written here is lua-cmsgpack's mapping between Lua values and
//! MessagePack:
//!
//! - `pack(...)` packs each argument and joins them; `unpack(s)` returns
//!   every value `s` holds, in order;
//! - a number is an integer when it is one, else a 64-bit float; a string
//!   is a MessagePack string, whatever its bytes;
//! - a table whose keys are exactly 1..n (the empty table included) is an
//!   array, any other a map; tables nested deeper than 16 pack as nil, as
//!   lua-cmsgpack's do;
//! - strings and binaries unpack as strings, arrays and maps as tables.
//!
//! Departures: a float is always written in 64 bits (lua-cmsgpack writes 32
//! where they hold it exactly; both read back the same), and
//! `unpack_one` and `unpack_limit` are not there.

use mlua::{Lua, MultiValue, Table, Value, Variadic};
use rmp::encode;

use super::lua_table::{entries, Entries};

/// Tables nested deeper than this pack as nil (lua-cmsgpack's
/// `LUACMSGPACK_MAX_NESTING`).
const MAX_NESTING: usize = 16;

/// Containers nested deeper than this do not unpack.
const MAX_UNPACK_DEPTH: usize = 1024;

/// The `cmsgpack` table: `pack` and `unpack`.
pub(super) fn library(lua: &Lua) -> mlua::Result<Table> {
    let cmsgpack = lua.create_table()?;
    cmsgpack.set(
        "pack",
        lua.create_function(|lua, values: Variadic<Value>| {
            if values.is_empty() {
                return Err(mlua::Error::runtime("MessagePack pack needs input."));
            }
            let mut out = Vec::new();
            for value in values.iter() {
                pack(&mut out, value, 0)?;
            }
            lua.create_string(&out)
        })?,
    )?;
    cmsgpack.set(
        "unpack",
        lua.create_function(|lua, packed: mlua::String| {
            let bytes = packed.as_bytes();
            let mut rest: &[u8] = &bytes;
            let mut values = Vec::new();
            while !rest.is_empty() {
                let value = rmpv::decode::read_value_with_max_depth(&mut rest, MAX_UNPACK_DEPTH)
                    .map_err(|e| mlua::Error::runtime(format!("Bad data format in input: {e}")))?;
                values.push(to_lua(lua, value)?);
            }
            Ok(MultiValue::from_iter(values))
        })?,
    )?;
    Ok(cmsgpack)
}

fn written<E: std::fmt::Display>(result: Result<impl Sized, E>) -> mlua::Result<()> {
    result
        .map(|_| ())
        .map_err(|e| mlua::Error::runtime(format!("MessagePack pack failed: {e}")))
}

fn pack(out: &mut Vec<u8>, value: &Value, depth: usize) -> mlua::Result<()> {
    match value {
        Value::Boolean(b) => written(encode::write_bool(out, *b)),
        Value::Integer(i) => written(encode::write_sint(out, *i)),
        Value::Number(n) if n.fract() == 0.0 && (i64::MIN as f64..i64::MAX as f64).contains(n) => {
            written(encode::write_sint(out, *n as i64))
        }
        Value::Number(n) => written(encode::write_f64(out, *n)),
        Value::String(s) => {
            let bytes = s.as_bytes();
            written(encode::write_str_len(out, bytes.len() as u32))?;
            out.extend_from_slice(&bytes);
            Ok(())
        }
        Value::Table(t) if depth < MAX_NESTING => table(out, t, depth + 1),
        // Nil, functions and the rest, and tables nested too deep.
        _ => written(encode::write_nil(out)),
    }
}

/// An array if the keys are exactly 1..n (the empty table included), else
/// a map.
fn table(out: &mut Vec<u8>, t: &Table, depth: usize) -> mlua::Result<()> {
    let Entries { pairs, sequence } = entries(t)?;
    let n = pairs.len();
    if sequence {
        written(encode::write_array_len(out, n as u32))?;
        for i in 1..=n {
            pack(out, &t.raw_get::<Value>(i)?, depth)?;
        }
        return Ok(());
    }
    written(encode::write_map_len(out, n as u32))?;
    for (key, value) in &pairs {
        pack(out, key, depth)?;
        pack(out, value, depth)?;
    }
    Ok(())
}

fn to_lua(lua: &Lua, value: rmpv::Value) -> mlua::Result<Value> {
    use rmpv::Value as Packed;
    Ok(match value {
        Packed::Nil => Value::Nil,
        Packed::Boolean(b) => Value::Boolean(b),
        Packed::Integer(i) => Value::Number(i.as_f64().unwrap_or(f64::NAN)),
        Packed::F32(f) => Value::Number(f64::from(f)),
        Packed::F64(f) => Value::Number(f),
        Packed::String(s) => Value::String(lua.create_string(s.into_bytes())?),
        Packed::Binary(b) | Packed::Ext(_, b) => Value::String(lua.create_string(b)?),
        Packed::Array(items) => {
            let items: Vec<Value> = items
                .into_iter()
                .map(|item| to_lua(lua, item))
                .collect::<mlua::Result<_>>()?;
            Value::Table(lua.create_sequence_from(items)?)
        }
        Packed::Map(pairs) => {
            let mut entries = Vec::with_capacity(pairs.len());
            for (key, value) in pairs {
                // A nil key cannot index a Lua table: lua-cmsgpack drops
                // the pair too.
                match to_lua(lua, key)? {
                    Value::Nil => {}
                    key => entries.push((key, to_lua(lua, value)?)),
                }
            }
            Value::Table(lua.create_table_from(entries)?)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lua() -> Lua {
        let lua = Lua::new();
        lua.globals().set("cmsgpack", library(&lua).unwrap()).unwrap();
        lua
    }

    fn hex(lua: &Lua, script: &str) -> String {
        let packed: mlua::String = lua.load(script).eval().unwrap();
        packed.as_bytes().iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn values_pack_as_lua_cmsgpack_packs_them() {
        let lua = lua();
        assert_eq!(hex(&lua, "return cmsgpack.pack(1, -1, 'a', true)"), "01ffa161c3");
        assert_eq!(hex(&lua, "return cmsgpack.pack({1, 2})"), "920102");
        assert_eq!(
            hex(&lua, "return cmsgpack.pack({})"),
            "90",
            "the empty table is an array"
        );
        assert_eq!(hex(&lua, "return cmsgpack.pack({a = 1})"), "81a16101");
        assert_eq!(hex(&lua, "return cmsgpack.pack(1.5)"), "cb3ff8000000000000");
        assert_eq!(hex(&lua, "return cmsgpack.pack(2^40)"), "cf0000010000000000");
    }

    #[test]
    fn unpack_gives_back_what_pack_wrote() {
        let lua = lua();
        let round = "local a, b, c = cmsgpack.unpack(cmsgpack.pack({x = {1, 'two', {y = false}}}, 'z', 3.25)) \
                     return a.x[1] .. a.x[2] .. tostring(a.x[3].y) .. b .. c";
        assert_eq!(lua.load(round).eval::<String>().unwrap(), "1twofalsez3.25");
    }

    #[test]
    fn what_cannot_pack_or_unpack_is_named() {
        let lua = lua();
        let refused = |script: &str| lua.load(script).exec().unwrap_err().to_string();
        assert!(refused("cmsgpack.pack()").contains("needs input"));
        assert!(refused("cmsgpack.unpack('\\146\\1')").contains("Bad data format"));
        let deep = "local t = {} local c = t for i = 1, 20 do c[1] = {} c = c[1] end return cmsgpack.pack(t)";
        assert!(
            hex(&lua, deep).ends_with("91c0"),
            "nested past 16, a table packs as nil"
        );
    }
}
