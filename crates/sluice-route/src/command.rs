//! Where a command goes: the router's command table. Pure: a command's
//! arguments in, a [`Route`] out.
//!
//! Single-key commands go to the shard of their key. Multi-key commands
//! whose reply can be put back together (MGET, MSET, DEL, EXISTS, UNLINK,
//! TOUCH) are split, one sub-request per shard; commands over two keys
//! (RENAME, LMOVE, SMOVE, ...), MSETNX, which is all or nothing, and the
//! set operations (SINTER, SUNIONSTORE, ...), which read their keys as
//! one, go to their shard if the keys share a slot. A range scan (`RANGE`) and KEYS
//! go to every shard, and so do FLUSHALL, FLUSHDB, DBSIZE and SCRIPT (a
//! script is loaded on every shard); SCAN walks
//! the shards one after another. Scripts go where their keys are, if they
//! are all in one slot (with none, to the shard of slot 0). The router
//! sees only the keys a script declares: as Redis Cluster requires, a
//! script must declare every key it touches, since an undeclared key of
//! another slot would be written on the wrong shard, where the router never
//! looks for it. A `sluice serve` shard refuses such a script, as a Redis
//! Cluster node does, from the slots the router tells it (`shard.rs`). MULTI, EXEC and DISCARD are the client's
//! session's: commands are queued at the router and sent together to the
//! shard of their keys, which must share a slot ([`keys_of`] finds them).
//! A command that is neither answered here nor in the table is refused
//! with an error naming it: guessing its key would send a write to
//! the wrong shard.

use std::collections::HashMap;
use std::sync::LazyLock;

/// How a multi-key command's replies are put back together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Merge {
    /// One value per key, in the order of the keys (MGET).
    Values,
    /// The sum of the integer replies (DEL, EXISTS, UNLINK, TOUCH).
    Sum,
    /// `OK` if every part says `OK` (MSET).
    Ok,
}

/// Where a command goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Answered by the router itself (PING, ECHO, HELLO, SELECT 0, QUIT...).
    Local,
    /// To the shard of the key at this argument index.
    Key(usize),
    /// Keys from index 1, each followed by `step - 1` values, split by
    /// shard.
    Keys { step: usize, merge: Merge },
    /// A count of keys at this index, the keys after it; all must share a
    /// slot: at 2 for `EVAL`/`EVALSHA`/`FCALL` and their read-only forms,
    /// at 1 for LMPOP, SINTERCARD, ZINTERCARD and ZMPOP.
    Counted(usize),
    /// Two keys at indexes 1 and 2 (RENAME, LMOVE, ...): to their shard;
    /// they must share a slot, as Redis Cluster requires.
    Pair,
    /// Keys from index 1, each followed by `step - 1` values (MSETNX: a
    /// value after each; SINTER, SUNIONSTORE, ...: keys alone): to their
    /// shard whole, since the command is all or nothing or reads its keys
    /// as one; they must share a slot.
    Together { step: usize },
    /// `RANGE start end [count]`: to every shard, the sorted parts merged.
    Range,
    /// To every shard, the arrays they answer joined (KEYS).
    Every,
    /// To every shard, one answer for all: the shards' own if they all gave
    /// the same, else the first error (FLUSHALL, FLUSHDB, SCRIPT LOAD);
    /// SCRIPT EXISTS's flags, 1 where every shard has the script.
    Everywhere,
    /// To every shard, the integers they answer added (DBSIZE).
    Sum,
    /// `SCAN cursor ...`: to the shard the router's cursor stands for
    /// (see `scan.rs`).
    Scan,
    /// Not routable; the reason names the command's kind.
    Refused(&'static str),
    /// Not in the table.
    Unknown,
}

impl Route {
    /// Whether the command goes to one slot: one key, or keys that must
    /// share a slot. Such commands of a client's pipeline may go to their
    /// shards together (`Router::execute_run`).
    pub fn one_slot(self) -> bool {
        matches!(
            self,
            Route::Key(_) | Route::Pair | Route::Together { .. } | Route::Counted(_)
        )
    }
}

/// Commands whose key is their first argument.
const FIRST_KEY: &[&str] = &[
    "append",
    "decr",
    "decrby",
    "dump",
    "expire",
    "expireat",
    "get",
    "getdel",
    "getex",
    "getrange",
    "getset",
    "hdel",
    "hexists",
    "hget",
    "hgetall",
    "hincrby",
    "hincrbyfloat",
    "hkeys",
    "hlen",
    "hmget",
    "hmset",
    "hrandfield",
    "hscan",
    "hset",
    "hsetnx",
    "hstrlen",
    "hvals",
    "incr",
    "incrby",
    "incrbyfloat",
    "lindex",
    "linsert",
    "llen",
    "lpop",
    "lpos",
    "lpush",
    "lpushx",
    "lrange",
    "lrem",
    "lset",
    "ltrim",
    "persist",
    "pexpire",
    "pexpireat",
    "pexpiretime",
    "psetex",
    "pttl",
    "restore",
    "rpop",
    "rpush",
    "rpushx",
    "sadd",
    "scard",
    "set",
    "setex",
    "setnx",
    "setrange",
    "sismember",
    "smembers",
    "smismember",
    "spop",
    "srandmember",
    "srem",
    "sscan",
    "strlen",
    "substr",
    "ttl",
    "type",
    "expiretime",
    "zadd",
    "zcard",
    "zcount",
    "zincrby",
    "zlexcount",
    "zmscore",
    "zpopmax",
    "zpopmin",
    "zrandmember",
    "zrange",
    "zrangebylex",
    "zrangebyscore",
    "zrank",
    "zrem",
    "zremrangebylex",
    "zremrangebyrank",
    "zremrangebyscore",
    "zrevrange",
    "zrevrangebylex",
    "zrevrangebyscore",
    "zrevrank",
    "zscan",
    "zscore",
    "bitcount",
    "bitpos",
    "getbit",
    "setbit",
    "pfadd",
    "xadd",
    "xdel",
    "xlen",
    "xrange",
    "xrevrange",
    "xtrim",
];

/// Commands answered by the router (MULTI, EXEC, DISCARD, WATCH and
/// UNWATCH by the client's session, which queues the transaction and keeps
/// the watch).
const LOCAL: &[&str] = &[
    "ping", "echo", "hello", "select", "quit", "command", "client", "auth", "reset", "config", "info", "multi", "exec",
    "discard", "watch", "unwatch", "time", "role",
];

const PUBSUB: &str = "pub/sub is not supported through sluice route";
const BLOCKING: &str = "blocking commands are not supported through sluice route";

/// Commands that need one connection's state across commands, or the
/// whole key space, and so cannot be split.
const REFUSED: &[(&str, &str)] = &[
    (
        "randomkey",
        "commands over the whole key space are not supported through sluice route",
    ),
    ("subscribe", PUBSUB),
    ("psubscribe", PUBSUB),
    ("ssubscribe", PUBSUB),
    ("unsubscribe", PUBSUB),
    ("punsubscribe", PUBSUB),
    ("publish", PUBSUB),
    ("pubsub", PUBSUB),
    ("blpop", BLOCKING),
    ("brpop", BLOCKING),
    ("blmove", BLOCKING),
    ("brpoplpush", BLOCKING),
    ("blmpop", BLOCKING),
    ("bzpopmin", BLOCKING),
    ("bzpopmax", BLOCKING),
    ("bzmpop", BLOCKING),
    (
        "xread",
        "XREAD is not supported through sluice route: its streams may be on several shards, and BLOCK would hold one",
    ),
    ("wait", "WAIT is not supported through sluice route: ask each shard"),
    (
        "monitor",
        "MONITOR is not supported through sluice route: monitor each shard",
    ),
    (
        "pfcount",
        "commands over several keys whose replies cannot be merged are not supported through sluice route",
    ),
];

/// The route of a command named `name` (lower case).
pub fn route(name: &str) -> Route {
    TABLE.get(name).copied().unwrap_or(Route::Unknown)
}

/// Every command's route, looked up once a command.
static TABLE: LazyLock<HashMap<&'static str, Route>> = LazyLock::new(|| {
    let mut table = HashMap::new();
    for name in FIRST_KEY {
        table.insert(*name, Route::Key(1));
    }
    for name in LOCAL {
        table.insert(*name, Route::Local);
    }
    for (name, why) in REFUSED {
        table.insert(*name, Route::Refused(why));
    }
    let values = Route::Keys {
        step: 1,
        merge: Merge::Values,
    };
    let ok = Route::Keys {
        step: 2,
        merge: Merge::Ok,
    };
    let sum = Route::Keys {
        step: 1,
        merge: Merge::Sum,
    };
    for (name, r) in [
        ("mget", values),
        ("mset", ok),
        ("del", sum),
        ("exists", sum),
        ("unlink", sum),
        ("touch", sum),
    ] {
        table.insert(name, r);
    }
    for name in ["eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"] {
        table.insert(name, Route::Counted(2));
    }
    for name in ["lmpop", "sintercard", "zintercard", "zmpop"] {
        table.insert(name, Route::Counted(1));
    }
    for name in ["rename", "renamenx", "copy", "smove", "lmove", "rpoplpush"] {
        table.insert(name, Route::Pair);
    }
    table.insert("msetnx", Route::Together { step: 2 });
    for name in ["sinter", "sunion", "sdiff", "sinterstore", "sunionstore", "sdiffstore"] {
        table.insert(name, Route::Together { step: 1 });
    }
    table.insert("range", Route::Range);
    table.insert("keys", Route::Every);
    table.insert("flushall", Route::Everywhere);
    table.insert("flushdb", Route::Everywhere);
    // SCRIPT LOAD, EXISTS and FLUSH: a script is cached on every shard, as
    // a Redis Cluster client loads it on every node.
    table.insert("script", Route::Everywhere);
    table.insert("dbsize", Route::Sum);
    table.insert("scan", Route::Scan);
    table
});

/// The keys of a [`Route::Counted`] command whose count is at `at` (`EVAL
/// script numkeys key... arg...`), or an error in Redis's words (without
/// its `ERR `).
fn counted_keys<'s, 'a>(args: &'s [&'a [u8]], at: usize) -> Result<&'s [&'a [u8]], String> {
    let numkeys = args
        .get(at)
        .and_then(|n| std::str::from_utf8(n).ok())
        .and_then(|n| n.parse::<i64>().ok())
        .ok_or("value is not an integer or out of range")?;
    if numkeys < 0 {
        return Err("Number of keys can't be negative".into());
    }
    args.get(at + 1..at + 1 + numkeys as usize)
        .ok_or_else(|| "Number of keys can't be greater than number of args".into())
}

/// The keys of a [`Route::Together`] command, `None` if its arguments do
/// not come in whole groups of `step`.
fn together<'s, 'a>(args: &'s [&'a [u8]], step: usize) -> Option<impl Iterator<Item = &'a [u8]> + 's> {
    (args.len() > step && (args.len() - 1).is_multiple_of(step)).then(|| args[1..].iter().step_by(step).copied())
}

/// The keys of a command queued inside MULTI, routed by `route`, or why
/// it cannot be queued: a transaction runs on one shard.
pub fn keys_of<'a>(name: &str, route: Route, args: &[&'a [u8]]) -> Result<Vec<&'a [u8]>, String> {
    let arity = || format!("wrong number of arguments for '{name}' command");
    match route {
        Route::Key(i) => args.get(i).map(|&k| vec![k]).ok_or_else(arity),
        Route::Keys { step, .. } if args.len() >= 2 && (args.len() - 1).is_multiple_of(step) => {
            Ok(args[1..].iter().step_by(step).copied().collect())
        }
        Route::Keys { .. } => Err(arity()),
        Route::Counted(at) => Ok(counted_keys(args, at)?.to_vec()),
        Route::Pair => args.get(1..3).map(<[&[u8]]>::to_vec).ok_or_else(arity),
        Route::Together { step } => together(args, step).map(|keys| keys.collect()).ok_or_else(arity),
        // UNWATCH is queued, as Redis queues it, and does nothing there.
        Route::Local if matches!(name, "ping" | "echo" | "unwatch" | "time") => Ok(Vec::new()),
        Route::Local => Err(format!("'{name}' is not allowed inside MULTI through sluice route")),
        Route::Range | Route::Every | Route::Everywhere | Route::Sum | Route::Scan => Err(format!(
            "'{name}' spans every shard: not inside MULTI through sluice route"
        )),
        Route::Refused(why) => Err(format!("'{name}': {why}")),
        Route::Unknown => Err(format!(
            "sluice route cannot route '{name}': it is not in the router's command table"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_has_one_route() {
        for name in FIRST_KEY {
            assert_eq!(route(name), Route::Key(1), "{name}");
            assert!(
                !LOCAL.contains(name) && !REFUSED.iter().any(|(n, _)| n == name),
                "{name} twice"
            );
        }
        assert_eq!(
            route("mget"),
            Route::Keys {
                step: 1,
                merge: Merge::Values
            }
        );
        assert_eq!(
            route("mset"),
            Route::Keys {
                step: 2,
                merge: Merge::Ok
            }
        );
        assert_eq!(route("multi"), Route::Local);
        assert_eq!(route("watch"), Route::Local);
        assert_eq!(route("frobnicate"), Route::Unknown);
    }

    #[test]
    fn a_queued_command_s_keys_are_found_or_it_is_refused() {
        let args = |w: &[&'static str]| w.iter().map(|a| a.as_bytes()).collect::<Vec<_>>();
        let set = args(&["SET", "k", "v"]);
        assert_eq!(keys_of("set", route("set"), &set), Ok(vec![&b"k"[..]]));
        let mset = args(&["MSET", "a", "1", "b", "2"]);
        assert_eq!(keys_of("mset", route("mset"), &mset), Ok(vec![&b"a"[..], &b"b"[..]]));
        assert!(keys_of("mset", route("mset"), &args(&["MSET", "a"])).is_err());
        assert_eq!(keys_of("ping", route("ping"), &args(&["PING"])), Ok(Vec::new()));
        assert!(keys_of("hello", route("hello"), &args(&["HELLO"])).is_err());
        assert!(keys_of("range", route("range"), &args(&["RANGE", "a", "b"])).is_err());
        assert!(keys_of("get", route("get"), &args(&["GET"]))
            .unwrap_err()
            .contains("arguments"));
    }

    #[test]
    fn counted_keys_follow_their_count() {
        let args: Vec<&[u8]> = vec![b"EVAL", b"return 1", b"2", b"a", b"b", b"x"];
        assert_eq!(counted_keys(&args, 2).unwrap(), &args[3..5]);
        let mut over = args.clone();
        over[2] = b"9";
        assert!(counted_keys(&over, 2).unwrap_err().contains("greater than"));
        over[2] = b"-1";
        assert!(counted_keys(&over, 2).unwrap_err().contains("negative"));
        over[2] = b"x";
        assert!(counted_keys(&over, 2).unwrap_err().contains("not an integer"));
        let lmpop: Vec<&[u8]> = vec![b"LMPOP", b"2", b"{l}a", b"{l}b", b"LEFT", b"COUNT", b"3"];
        assert_eq!(route("lmpop"), Route::Counted(1));
        assert_eq!(keys_of("lmpop", route("lmpop"), &lmpop).unwrap(), &lmpop[2..4]);
    }
}
