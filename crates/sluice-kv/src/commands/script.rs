//! Lua scripts: EVAL, EVALSHA, their read-only forms and SCRIPT LOAD,
//! EXISTS and FLUSH, as Redis 7 runs them: Lua 5.1 (through `mlua`, which
//! builds it), the keys in `KEYS` and the other arguments in `ARGV`,
//! `redis.call` and `redis.pcall` running this server's commands, and the
//! replies converted between RESP and Lua by Redis's rules (nil is
//! `false`, a status is `{ok = ...}`, an error `{err = ...}`, a Lua number
//! an integer, truncated). Client libraries build on them: redis-py's
//! `lock()` releases its lock with a script.
//!
//! A script runs atomically, as EXEC does: it holds every key stripe, and
//! its writes reach the store as one batch when it ends, seen by its own
//! reads before. As in Redis, a script that fails part way keeps what it
//! wrote before the failure. Scripts are cached by their SHA1 (EVAL caches
//! too, so EVALSHA finds what EVAL ran), up to [`MAX_SCRIPTS`].
//!
//! Departures: a script that runs past the server's `script_time_limit`
//! (5 s by default, `sluice serve --script-time-limit`) is stopped (Redis
//! lets it run and answers other clients `BUSY` until `SCRIPT KILL`; here
//! other writers wait on the stripes, so it must end); its writes so far
//! are kept, as for any failure. The `string`, `table` and `math`
//! libraries are loaded, and `cjson` (`cjson.rs`), `cmsgpack`
//! (`cmsgpack.rs`), `bit` (`bitop.rs`) and `struct` (`lua_struct.rs`). Globals are
//! read-only, as in Redis 7. Errors name the script by its SHA1 but not
//! its line (`script: <sha1>`, where Redis adds `, on
//! @user_script:<line>.`).
//!
//! A shard told its hash slots (`CONFIG SET shard-slots`, sent by
//! `sluice route`) refuses a command of a script whose key is in a slot it
//! does not serve, as a Redis Cluster node does: the router sends a script
//! to the shard of the keys it declares, and a key it did not declare
//! written here would be one the router never looks for here.

use std::cell::RefCell;
use std::collections::HashMap;
use std::time::Instant;

use mlua::{HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Table, Value, VmState};
use sha1::{Digest, Sha1};
use sluice_resp::slot::{slot, SlotRanges};

use super::integer::{not_integer, parse_i64};
use super::session::Session;
use super::store;
use crate::resp::Reply;
use crate::shared::Shared;

/// Most scripts the cache holds; past it, EVAL runs a new script without
/// keeping it and SCRIPT LOAD is refused, until SCRIPT FLUSH.
pub(crate) const MAX_SCRIPTS: usize = 10_000;

/// Runs one command for a script (`redis.call`), or refuses it as Redis
/// refuses commands that scripts may not call.
pub(super) type Call<'a> = &'a dyn Fn(&Shared, &mut Session, &[Vec<u8>]) -> Reply;

/// A command's error reply, raised through Lua by `redis.call`.
#[derive(Debug)]
struct CommandError(String);

impl std::fmt::Display for CommandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CommandError {}

fn sha1_hex(body: &[u8]) -> String {
    Sha1::digest(body).iter().map(|b| format!("{b:02x}")).collect()
}

/// EVAL, EVAL_RO `script numkeys key... arg...`; EVALSHA, EVALSHA_RO
/// `sha1 numkeys ...`.
pub(super) fn eval(shared: &Shared, session: &mut Session, name: &str, args: &[Vec<u8>], call: Call) -> Reply {
    let numkeys = match parse_i64(&args[1]) {
        None => return not_integer(),
        Some(n) if n < 0 => return Reply::error("Number of keys can't be negative"),
        Some(n) if n as u64 > (args.len() - 2) as u64 => {
            return Reply::error("Number of keys can't be greater than number of args")
        }
        Some(n) => n as usize,
    };
    let (keys, argv) = args[2..].split_at(numkeys);
    let (sha, body) = if name.starts_with("evalsha") {
        let sha = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
        let cached = lock(shared).get(&sha).cloned();
        match cached {
            Some(body) => (sha, body),
            None => return Reply::Error("NOSCRIPT No matching script. Please use EVAL.".into()),
        }
    } else {
        let sha = sha1_hex(&args[0]);
        let mut cache = lock(shared);
        if cache.len() < MAX_SCRIPTS {
            cache.entry(sha.clone()).or_insert_with(|| args[0].clone());
        }
        (sha, args[0].clone())
    };
    let read_only = name.ends_with("_ro");
    let run = || run_script(shared, session, &sha, &body, keys, argv, read_only, call);
    store::as_one(shared, run).unwrap_or_else(|refused| refused)
}

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, HashMap<String, Vec<u8>>> {
    shared.scripts.lock().unwrap_or_else(|e| e.into_inner())
}

/// SCRIPT LOAD, EXISTS, FLUSH.
pub(super) fn script(shared: &Shared, args: &[Vec<u8>]) -> Reply {
    let sub = args[0].to_ascii_lowercase();
    match (sub.as_slice(), &args[1..]) {
        (b"load", [body]) => {
            let sha = sha1_hex(body);
            let mut cache = lock(shared);
            if cache.len() >= MAX_SCRIPTS && !cache.contains_key(&sha) {
                return Reply::error(format!(
                    "the script cache is full ({MAX_SCRIPTS} scripts): SCRIPT FLUSH empties it"
                ));
            }
            cache.entry(sha.clone()).or_insert_with(|| body.clone());
            Reply::Bulk(Some(sha.into_bytes()))
        }
        (b"exists", shas) if !shas.is_empty() => {
            let cache = lock(shared);
            let known = |sha: &Vec<u8>| cache.contains_key(&String::from_utf8_lossy(sha).to_ascii_lowercase());
            Reply::Array(shas.iter().map(|s| Reply::Integer(i64::from(known(s)))).collect())
        }
        (b"flush", []) => {
            lock(shared).clear();
            Reply::ok()
        }
        (b"flush", [mode]) if matches!(mode.to_ascii_lowercase().as_slice(), b"sync" | b"async") => {
            lock(shared).clear();
            Reply::ok()
        }
        (b"load" | b"exists" | b"flush", _) => Reply::error(format!(
            "wrong number of arguments for 'script|{}' command",
            String::from_utf8_lossy(&sub)
        )),
        _ => Reply::error(format!(
            "unknown subcommand '{}'. Try SCRIPT HELP.",
            String::from_utf8_lossy(&args[0])
        )),
    }
}

/// Runs `body` with `KEYS` and `ARGV`; its reply.
#[allow(clippy::too_many_arguments)]
fn run_script(
    shared: &Shared,
    session: &mut Session,
    sha: &str,
    body: &[u8],
    keys: &[Vec<u8>],
    argv: &[Vec<u8>],
    read_only: bool,
    call: Call,
) -> Reply {
    let outcome = (|| -> mlua::Result<Reply> {
        let lua = Lua::new_with(StdLib::STRING | StdLib::TABLE | StdLib::MATH, LuaOptions::new())?;
        let (started, limit) = (Instant::now(), shared.options.script_time_limit);
        lua.set_hook(HookTriggers::new().every_nth_instruction(10_000), move |_, _| {
            if started.elapsed() > limit {
                Err(mlua::Error::runtime(format!(
                    "the script ran past its time limit of {limit:?} and was stopped; what it wrote before is kept"
                )))
            } else {
                Ok(VmState::Continue)
            }
        });
        let globals = lua.globals();
        globals.set("KEYS", strings(&lua, keys)?)?;
        globals.set("ARGV", strings(&lua, argv)?)?;
        globals.set("cjson", super::cjson::library(&lua)?)?;
        globals.set("bit", super::bitop::library(&lua)?)?;
        globals.set("cmsgpack", super::cmsgpack::library(&lua)?)?;
        globals.set("struct", super::lua_struct::library(&lua)?)?;
        let session = RefCell::new(session);
        let slots = shared.shard_slots();
        let command = |lua: &Lua, args: MultiValue, raise: bool| -> mlua::Result<Value> {
            let args = command_args(lua, args)?;
            let name = args.first().map(|a| a.to_ascii_lowercase()).unwrap_or_default();
            let reply = if read_only && super::command::writes(&name) {
                Reply::error("Write commands are not allowed from read-only scripts.")
            } else if let Some(refusal) = slots.as_ref().and_then(|s| non_local_key(s, &args)) {
                refusal
            } else {
                call(shared, &mut session.borrow_mut(), &args)
            };
            match reply {
                Reply::Error(e) if raise => Err(mlua::Error::external(CommandError(e))),
                reply => to_lua(lua, reply),
            }
        };
        let command = &command;
        lua.scope(|scope| {
            let redis = lua.create_table()?;
            redis.set(
                "call",
                scope.create_function(move |lua, args| command(lua, args, true))?,
            )?;
            redis.set(
                "pcall",
                scope.create_function(move |lua, args| command(lua, args, false))?,
            )?;
            redis.set(
                "error_reply",
                lua.create_function(|lua, e: mlua::String| one_field(lua, "err", e))?,
            )?;
            redis.set(
                "status_reply",
                lua.create_function(|lua, s: mlua::String| one_field(lua, "ok", s))?,
            )?;
            redis.set(
                "sha1hex",
                lua.create_function(|_, s: mlua::String| Ok(sha1_hex(&s.as_bytes())))?,
            )?;
            redis.set("log", lua.create_function(|_, _: MultiValue| Ok(()))?)?;
            for (i, level) in ["LOG_DEBUG", "LOG_VERBOSE", "LOG_NOTICE", "LOG_WARNING"]
                .iter()
                .enumerate()
            {
                redis.set(*level, i)?;
            }
            lua.globals().set("redis", redis)?;
            let value: Value = lua
                .load(body)
                .set_name("=user_script")
                .set_environment(read_only_globals(&lua)?)
                .call(())?;
            Ok(from_lua(value))
        })
    })();
    outcome.unwrap_or_else(|e| match command_error(&e) {
        Some(text) => Reply::Error(format!("{text} script: {sha}")),
        None => match e {
            mlua::Error::SyntaxError { message, .. } => {
                Reply::error(format!("Error compiling script (new function): {message}"))
            }
            other => Reply::error(format!("{} script: {sha}", lua_message(&other))),
        },
    })
}

/// A shard's refusal of a command whose key is in a slot it does not
/// serve, naming the key and the slots; none if every key is its own.
fn non_local_key(slots: &SlotRanges, args: &[Vec<u8>]) -> Option<Reply> {
    let key = super::command::keys_of(args)
        .into_iter()
        .find(|k| !slots.contains(slot(k)))?;
    Some(Reply::error(format!(
        "Script attempted to access a non local key in a cluster node: '{}' is in slot {}, this shard serves slots {}",
        String::from_utf8_lossy(key),
        slot(key),
        slots.brief(8)
    )))
}

/// The script's globals: Redis's, readable and not writable, as Redis 7
/// keeps them, so that a script cannot leave state for the next or
/// replace `redis.call` (its locals are its own).
fn read_only_globals(lua: &Lua) -> mlua::Result<Table> {
    let view = lua.create_table()?;
    let meta = lua.create_table()?;
    meta.set("__index", lua.globals())?;
    meta.set(
        "__newindex",
        lua.create_function(|_, _: MultiValue| -> mlua::Result<()> {
            Err(mlua::Error::runtime("Attempt to modify a readonly table"))
        })?,
    )?;
    view.set_metatable(Some(meta));
    Ok(view)
}

fn strings(lua: &Lua, items: &[Vec<u8>]) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    for (i, item) in items.iter().enumerate() {
        t.set(i + 1, lua.create_string(item)?)?;
    }
    Ok(t)
}

fn one_field(lua: &Lua, field: &str, text: mlua::String) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.set(field, text)?;
    Ok(t)
}

/// `redis.call`'s arguments as a command: strings, and numbers as Lua
/// writes them.
fn command_args(lua: &Lua, args: MultiValue) -> mlua::Result<Vec<Vec<u8>>> {
    if args.is_empty() {
        return Err(mlua::Error::external(CommandError(
            "ERR Please specify at least one argument for this redis lib call".into(),
        )));
    }
    args.into_iter()
        .map(|v| match v {
            Value::String(_) | Value::Integer(_) | Value::Number(_) => lua
                .coerce_string(v)?
                .map(|s| s.as_bytes().to_vec())
                .ok_or_else(|| mlua::Error::runtime("a number that Lua cannot write")),
            _ => Err(mlua::Error::external(CommandError(
                "ERR Lua redis lib command arguments must be strings or integers".into(),
            ))),
        })
        .collect()
}

/// A command's reply as a script sees it (RESP2's shapes).
fn to_lua(lua: &Lua, reply: Reply) -> mlua::Result<Value> {
    Ok(match reply {
        Reply::Integer(n) => Value::Integer(n),
        Reply::Bulk(Some(b)) | Reply::Double(b) => Value::String(lua.create_string(b)?),
        Reply::Bulk(None) | Reply::NullArray => Value::Boolean(false),
        Reply::Simple(s) => Value::Table(one_field(lua, "ok", lua.create_string(s)?)?),
        Reply::Error(e) => Value::Table(one_field(lua, "err", lua.create_string(e)?)?),
        // Scripts cannot call the commands that reply pushes or several
        // replies (SUBSCRIBE is noscript); read as arrays all the same.
        Reply::Array(items) | Reply::Set(items) | Reply::Push(items) | Reply::Many(items) => {
            let t = lua.create_table()?;
            for (i, item) in items.into_iter().enumerate() {
                t.set(i + 1, to_lua(lua, item)?)?;
            }
            Value::Table(t)
        }
        Reply::Map(pairs) => {
            let t = lua.create_table()?;
            for (i, (k, v)) in pairs.into_iter().enumerate() {
                t.set(2 * i + 1, to_lua(lua, k)?)?;
                t.set(2 * i + 2, to_lua(lua, v)?)?;
            }
            Value::Table(t)
        }
    })
}

/// A script's value as its reply.
fn from_lua(value: Value) -> Reply {
    match value {
        Value::Boolean(true) => Reply::Integer(1),
        Value::Integer(n) => Reply::Integer(n),
        Value::Number(f) => Reply::Integer(truncated(f)),
        Value::String(s) => Reply::Bulk(Some(s.as_bytes().to_vec())),
        Value::Table(t) => {
            let field = |name: &str| match t.raw_get::<Value>(name) {
                Ok(Value::String(s)) => Some(String::from_utf8_lossy(&s.as_bytes()).into_owned()),
                _ => None,
            };
            if let Some(e) = field("err") {
                return Reply::Error(e);
            }
            if let Some(s) = field("ok") {
                return Reply::Simple(s);
            }
            let mut items = Vec::new();
            for i in 1.. {
                match t.raw_get::<Value>(i) {
                    Ok(Value::Nil) | Err(_) => break,
                    Ok(v) => items.push(from_lua(v)),
                }
            }
            Reply::Array(items)
        }
        _ => Reply::Bulk(None),
    }
}

/// A Lua number as Redis makes it an integer reply: C's cast to `long
/// long`, which truncates, and which on x86-64 gives the least integer
/// for what does not fit (NaN included).
fn truncated(f: f64) -> i64 {
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if f > -LIMIT && f < LIMIT {
        f as i64
    } else {
        i64::MIN
    }
}

/// The command error a failed script raised through `redis.call`, if any.
fn command_error(e: &mlua::Error) -> Option<String> {
    match e {
        mlua::Error::CallbackError { cause, .. } => command_error(cause),
        mlua::Error::WithContext { cause, .. } => command_error(cause),
        mlua::Error::ExternalError(ext) => ext.downcast_ref::<CommandError>().map(|c| c.0.clone()),
        _ => None,
    }
}

/// Lua's message for a failure, without mlua's traceback.
fn lua_message(e: &mlua::Error) -> String {
    match e {
        mlua::Error::RuntimeError(m) => m.clone(),
        mlua::Error::CallbackError { cause, .. } => lua_message(cause),
        mlua::Error::WithContext { cause, .. } => lua_message(cause),
        other => other.to_string(),
    }
}
