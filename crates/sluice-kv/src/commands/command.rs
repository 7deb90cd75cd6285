//! `COMMAND`: what the server tells clients about its commands, as Redis 7
//! tells it (cluster-aware clients read where each command's keys are;
//! tools read its flags): each command's arity (its argument count with
//! the name, or at least the negation of it), flags, first key, last key
//! and step between keys, ACL categories, and a key specification drawn
//! from those positions. `COMMAND COUNT`, `INFO`, `LIST`, `GETKEYS` and
//! `DOCS` (an empty map: the server has no command documentation) answer
//! as Redis's do.
//!
//! Departures: the key specifications carry only `RW` or `RO` as flags
//! (Redis also says how each key is used: `access`, `update`, ...), and in
//! RESP3 the flags and categories come as arrays rather than sets, which
//! `sluice-resp` does not write; clients read both alike.

use crate::resp::Reply;

/// What COMMAND says about one command.
pub(super) struct Info {
    pub name: &'static str,
    /// Redis's arity: the argument count with the command's name, or at
    /// least its negation.
    pub arity: i64,
    pub flags: &'static [&'static str],
    /// First key, last key (negative: from the end) and step, as argument
    /// positions counting the name as 0; all 0 for a command of no keys.
    pub keys: [i64; 3],
    pub categories: &'static [&'static str],
    /// Where a command whose keys move (`movablekeys`) finds them.
    pub movable: Movable,
}

/// How a command with `movablekeys` finds its keys.
#[derive(Clone, Copy)]
pub(super) enum Movable {
    /// Its keys are at fixed positions ([`Info::keys`]).
    No,
    /// A count of keys at this argument position (the name at 0), the
    /// keys after it (EVAL's at 2, SINTERCARD's at 1).
    KeyNum(i64),
    /// Its keys follow this keyword, as many as the arguments after them
    /// (XREAD's STREAMS: keys, then one ID each).
    Keyword(&'static str),
}

const fn info(
    name: &'static str,
    arity: i64,
    flags: &'static [&'static str],
    keys: [i64; 3],
    categories: &'static [&'static str],
) -> Info {
    Info {
        name,
        arity,
        flags,
        keys,
        categories,
        movable: Movable::No,
    }
}

impl Info {
    const fn movable(mut self, movable: Movable) -> Info {
        self.movable = movable;
        self
    }
}

/// Every command of [`COMMANDS`], in its order.
pub(super) const INFO: &[Info] = &[
    info(
        "append",
        3,
        &["write", "denyoom", "fast"],
        [1, 1, 1],
        &["@write", "@string", "@fast"],
    ),
    info(
        "auth",
        -2,
        &["noscript", "loading", "stale", "fast", "no_auth", "allow_busy"],
        [0, 0, 0],
        &["@fast", "@connection"],
    ),
    info(
        "blmove",
        6,
        &["write", "denyoom", "noscript", "blocking"],
        [1, 2, 1],
        &["@write", "@list", "@slow", "@blocking"],
    ),
    info(
        "blmpop",
        -5,
        &["write", "blocking", "movablekeys"],
        [0, 0, 0],
        &["@write", "@list", "@slow", "@blocking"],
    )
    .movable(Movable::KeyNum(2)),
    info(
        "blpop",
        -3,
        &["write", "noscript", "blocking"],
        [1, -2, 1],
        &["@write", "@list", "@slow", "@blocking"],
    ),
    info(
        "brpop",
        -3,
        &["write", "noscript", "blocking"],
        [1, -2, 1],
        &["@write", "@list", "@slow", "@blocking"],
    ),
    info(
        "brpoplpush",
        4,
        &["write", "denyoom", "noscript", "blocking"],
        [1, 2, 1],
        &["@write", "@list", "@slow", "@blocking"],
    ),
    info(
        "bzpopmax",
        -3,
        &["write", "noscript", "blocking", "fast"],
        [1, -2, 1],
        &["@write", "@sortedset", "@fast", "@blocking"],
    ),
    info(
        "bzpopmin",
        -3,
        &["write", "noscript", "blocking", "fast"],
        [1, -2, 1],
        &["@write", "@sortedset", "@fast", "@blocking"],
    ),
    info("client", -2, &[], [0, 0, 0], &["@slow"]),
    info(
        "command",
        -1,
        &["loading", "stale"],
        [0, 0, 0],
        &["@slow", "@connection"],
    ),
    info("config", -2, &[], [0, 0, 0], &["@slow"]),
    info(
        "dbsize",
        1,
        &["readonly", "fast"],
        [0, 0, 0],
        &["@keyspace", "@read", "@fast"],
    ),
    info(
        "decr",
        2,
        &["write", "denyoom", "fast"],
        [1, 1, 1],
        &["@write", "@string", "@fast"],
    ),
    info(
        "decrby",
        3,
        &["write", "denyoom", "fast"],
        [1, 1, 1],
        &["@write", "@string", "@fast"],
    ),
    info("del", -2, &["write"], [1, -1, 1], &["@keyspace", "@write", "@slow"]),
    info(
        "discard",
        1,
        &["noscript", "loading", "stale", "fast", "allow_busy"],
        [0, 0, 0],
        &["@fast", "@transaction"],
    ),
    info(
        "echo",
        2,
        &["loading", "stale", "fast"],
        [0, 0, 0],
        &["@fast", "@connection"],
    ),
    info(
        "eval",
        -3,
        &["noscript", "stale", "skip_monitor", "no_mandatory_keys", "movablekeys"],
        [0, 0, 0],
        &["@slow", "@scripting"],
    )
    .movable(Movable::KeyNum(2)),
    info(
        "eval_ro",
        -3,
        &[
            "readonly",
            "noscript",
            "stale",
            "skip_monitor",
            "no_mandatory_keys",
            "movablekeys",
        ],
        [0, 0, 0],
        &["@slow", "@scripting"],
    )
    .movable(Movable::KeyNum(2)),
    info(
        "evalsha",
        -3,
        &["noscript", "stale", "skip_monitor", "no_mandatory_keys", "movablekeys"],
        [0, 0, 0],
        &["@slow", "@scripting"],
    )
    .movable(Movable::KeyNum(2)),
    info(
        "evalsha_ro",
        -3,
        &[
            "readonly",
            "noscript",
            "stale",
            "skip_monitor",
            "no_mandatory_keys",
            "movablekeys",
        ],
        [0, 0, 0],
        &["@slow", "@scripting"],
    )
    .movable(Movable::KeyNum(2)),
    info(
        "exec",
        1,
        &["noscript", "loading", "stale", "skip_slowlog"],
        [0, 0, 0],
        &["@slow", "@transaction"],
    ),
    info(
        "exists",
        -2,
        &["readonly", "fast"],
        [1, -1, 1],
        &["@keyspace", "@read", "@fast"],
    ),
    info(
        "expire",
        -3,
        &["write", "fast"],
        [1, 1, 1],
        &["@keyspace", "@write", "@fast"],
    ),
    info(
        "expireat",
        -3,
        &["write", "fast"],
        [1, 1, 1],
        &["@keyspace", "@write", "@fast"],
    ),
    info(
        "expiretime",
        2,
        &["readonly", "fast"],
        [1, 1, 1],
        &["@keyspace", "@read", "@fast"],
    ),
    info(
        "flushall",
        -1,
        &["write"],
        [0, 0, 0],
        &["@keyspace", "@write", "@slow", "@dangerous"],
    ),
    info(
        "flushdb",
        -1,
        &["write"],
        [0, 0, 0],
        &["@keyspace", "@write", "@slow", "@dangerous"],
    ),
    info(
        "get",
        2,
        &["readonly", "fast"],
        [1, 1, 1],
        &["@read", "@string", "@fast"],
    ),
    info(
        "getdel",
        2,
        &["write", "fast"],
        [1, 1, 1],
        &["@write", "@string", "@fast"],
    ),
    info(
        "getex",
        -2,
        &["write", "fast"],
        [1, 1, 1],
        &["@write", "@string", "@fast"],
    ),
    info("getrange", 4, &["readonly"], [1, 1, 1], &["@read", "@string", "@slow"]),
    info(
        "getset",
        3,
        &["write", "denyoom", "fast"],
        [1, 1, 1],
        &["@write", "@string", "@fast"],
    ),
    info("hdel", -3, &["write", "fast"], [1, 1, 1], &["@write", "@hash", "@fast"]),
    info(
        "hello",
        -1,
        &["noscript", "loading", "stale", "fast", "no_auth", "allow_busy"],
        [0, 0, 0],
        &["@fast", "@connection"],
    ),
    info(
        "hexists",
        3,
        &["readonly", "fast"],
        [1, 1, 1],
        &["@read", "@hash", "@fast"],
    ),
    info(
        "hget",
        3,
        &["readonly", "fast"],
        [1, 1, 1],
        &["@read", "@hash", "@fast"],
    ),
    info("hgetall", 2, &["readonly"], [1, 1, 1], &["@read", "@hash", "@slow"]),
    info(
        "hincrby",
        4,
        &["write", "denyoom", "fast"],
        [1, 1, 1],
        &["@write", "@hash", "@fast"],
    ),
    info(
        "hincrbyfloat",
        4,
        &["write", "denyoom", "fast"],
        [1, 1, 1],
        &["@write", "@hash", "@fast"],
    ),
    info("hkeys", 2, &["readonly"], [1, 1, 1], &["@read", "@hash", "@slow"]),
    info(
        "hlen",
        2,
        &["readonly", "fast"],
        [1, 1, 1],
        &["@read", "@hash", "@fast"],
    ),
    info(
        "hmget",
        -3,
        &["readonly", "fast"],
        [1, 1, 1],
        &["@read", "@hash", "@fast"],
    ),
    info(
        "hmset",
        -4,
        &["write", "denyoom", "fast"],
        [1, 1, 1],
        &["@write", "@hash", "@fast"],
    ),
    info("hscan", -3, &["readonly"], [1, 1, 1], &["@read", "@hash", "@slow"]),
    info(
        "hset",
        -4,
        &["write", "denyoom", "fast"],
        [1, 1, 1],
        &["@write", "@hash", "@fast"],
    ),
    info(
        "hsetnx",
        4,
        &["write", "denyoom", "fast"],
        [1, 1, 1],
        &["@write", "@hash", "@fast"],
    ),
    info(
        "hstrlen",
        3,
        &["readonly", "fast"],
        [1, 1, 1],
        &["@read", "@hash", "@fast"],
    ),
    info("hvals", 2, &["readonly"], [1, 1, 1], &["@read", "@hash", "@slow"]),
    info(
        "incr",
        2,
        &["write", "denyoom", "fast"],
        [1, 1, 1],
        &["@write", "@string", "@fast"],
    ),
    info(
        "incrby",
        3,
        &["write", "denyoom", "fast"],
        [1, 1, 1],
        &["@write", "@string", "@fast"],
    ),
    info(
        "incrbyfloat",
        3,
        &["write", "denyoom", "fast"],
        [1, 1, 1],
        &["@write", "@string", "@fast"],
    ),
    info("info", -1, &["loading", "stale"], [0, 0, 0], &["@slow", "@dangerous"]),
    info(
        "keys",
        2,
        &["readonly"],
        [0, 0, 0],
        &["@keyspace", "@read", "@slow", "@dangerous"],
    ),
    info("lindex", 3, &["readonly"], [1, 1, 1], &["@read", "@list", "@slow"]),
    info(
        "linsert",
        5,
        &["write", "denyoom"],
        [1, 1, 1],
        &["@write", "@list", "@slow"],
    ),
    info(
        "llen",
        2,
        &["readonly", "fast"],
        [1, 1, 1],
        &["@read", "@list", "@fast"],
    ),
    info(
        "lmove",
        5,
        &["write", "denyoom"],
        [1, 2, 1],
        &["@write", "@list", "@slow"],
    ),
    info(
        "lmpop",
        -4,
        &["write", "movablekeys"],
        [0, 0, 0],
        &["@write", "@list", "@slow"],
    )
    .movable(Movable::KeyNum(1)),
    info("lpop", -2, &["write", "fast"], [1, 1, 1], &["@write", "@list", "@fast"]),
    info("lpos", -3, &["readonly"], [1, 1, 1], &["@read", "@list", "@slow"]),
    info(
        "lpush",
        -3,
        &["write", "denyoom", "fast"],
        [1, 1, 1],
        &["@write", "@list", "@fast"],
    ),
    info(
        "lpushx",
        -3,
        &["write", "denyoom", "fast"],
        [1, 1, 1],
        &["@write", "@list", "@fast"],
    ),
    info("lrange", 4, &["readonly"], [1, 1, 1], &["@read", "@list", "@slow"]),
    info("lrem", 4, &["write"], [1, 1, 1], &["@write", "@list", "@slow"]),
    info(
        "lset",
        4,
        &["write", "denyoom"],
        [1, 1, 1],
        &["@write", "@list", "@slow"],
    ),
    info("ltrim", 4, &["write"], [1, 1, 1], &["@write", "@list", "@slow"]),
    info(
        "mget",
        -2,
        &["readonly", "fast"],
        [1, -1, 1],
        &["@read", "@string", "@fast"],
    ),
    info(
        "mset",
        -3,
        &["write", "denyoom"],
        [1, -1, 2],
        &["@write", "@string", "@slow"],
    ),
    info(
        "msetnx",
        -3,
        &["write", "denyoom"],
        [1, -1, 2],
        &["@write", "@string", "@slow"],
    ),
    info(
        "multi",
        1,
        &["noscript", "loading", "stale", "fast", "allow_busy"],
        [0, 0, 0],
        &["@fast", "@transaction"],
    ),
    info(
        "persist",
        2,
        &["write", "fast"],
        [1, 1, 1],
        &["@keyspace", "@write", "@fast"],
    ),
    info(
        "pexpire",
        -3,
        &["write", "fast"],
        [1, 1, 1],
        &["@keyspace", "@write", "@fast"],
    ),
    info(
        "pexpireat",
        -3,
        &["write", "fast"],
        [1, 1, 1],
        &["@keyspace", "@write", "@fast"],
    ),
    info(
        "pexpiretime",
        2,
        &["readonly", "fast"],
        [1, 1, 1],
        &["@keyspace", "@read", "@fast"],
    ),
    info("ping", -1, &["fast"], [0, 0, 0], &["@fast", "@connection"]),
    info(
        "psetex",
        4,
        &["write", "denyoom"],
        [1, 1, 1],
        &["@write", "@string", "@slow"],
    ),
    info(
        "psubscribe",
        -2,
        &["pubsub", "noscript", "loading", "stale"],
        [0, 0, 0],
        &["@pubsub", "@slow"],
    ),
    info(
        "pttl",
        2,
        &["readonly", "fast"],
        [1, 1, 1],
        &["@keyspace", "@read", "@fast"],
    ),
    info(
        "publish",
        3,
        &["pubsub", "loading", "stale", "fast"],
        [0, 0, 0],
        &["@pubsub", "@fast"],
    ),
    info("pubsub", -2, &[], [0, 0, 0], &["@slow"]),
    info(
        "punsubscribe",
        -1,
        &["pubsub", "noscript", "loading", "stale"],
        [0, 0, 0],
        &["@pubsub", "@slow"],
    ),
    info(
        "quit",
        -1,
        &["noscript", "loading", "stale", "fast", "no_auth", "allow_busy"],
        [0, 0, 0],
        &["@fast", "@connection"],
    ),
    info("range", -3, &["readonly"], [0, 0, 0], &["@read", "@slow"]),
    info("rename", 3, &["write"], [1, 2, 1], &["@keyspace", "@write", "@slow"]),
    info(
        "renamenx",
        3,
        &["write", "fast"],
        [1, 2, 1],
        &["@keyspace", "@write", "@fast"],
    ),
    info(
        "role",
        1,
        &["noscript", "loading", "stale", "fast"],
        [0, 0, 0],
        &["@admin", "@fast", "@dangerous"],
    ),
    info("rpop", -2, &["write", "fast"], [1, 1, 1], &["@write", "@list", "@fast"]),
    info(
        "rpoplpush",
        3,
        &["write", "denyoom"],
        [1, 2, 1],
        &["@write", "@list", "@slow"],
    ),
    info(
        "rpush",
        -3,
        &["write", "denyoom", "fast"],
        [1, 1, 1],
        &["@write", "@list", "@fast"],
    ),
    info(
        "rpushx",
        -3,
        &["write", "denyoom", "fast"],
        [1, 1, 1],
        &["@write", "@list", "@fast"],
    ),
    info(
        "sadd",
        -3,
        &["write", "denyoom", "fast"],
        [1, 1, 1],
        &["@write", "@set", "@fast"],
    ),
    info("scan", -2, &["readonly"], [0, 0, 0], &["@keyspace", "@read", "@slow"]),
    info(
        "scard",
        2,
        &["readonly", "fast"],
        [1, 1, 1],
        &["@read", "@set", "@fast"],
    ),
    info("script", -2, &[], [0, 0, 0], &["@slow"]),
    info("sdiff", -2, &["readonly"], [1, -1, 1], &["@read", "@set", "@slow"]),
    info(
        "sdiffstore",
        -3,
        &["write", "denyoom"],
        [1, -1, 1],
        &["@write", "@set", "@slow"],
    ),
    info(
        "select",
        2,
        &["loading", "stale", "fast"],
        [0, 0, 0],
        &["@fast", "@connection"],
    ),
    info(
        "set",
        -3,
        &["write", "denyoom"],
        [1, 1, 1],
        &["@write", "@string", "@slow"],
    ),
    info(
        "setex",
        4,
        &["write", "denyoom"],
        [1, 1, 1],
        &["@write", "@string", "@slow"],
    ),
    info(
        "setnx",
        3,
        &["write", "denyoom", "fast"],
        [1, 1, 1],
        &["@write", "@string", "@fast"],
    ),
    info(
        "setrange",
        4,
        &["write", "denyoom"],
        [1, 1, 1],
        &["@write", "@string", "@slow"],
    ),
    info("sinter", -2, &["readonly"], [1, -1, 1], &["@read", "@set", "@slow"]),
    info(
        "sintercard",
        -3,
        &["readonly", "movablekeys"],
        [0, 0, 0],
        &["@read", "@set", "@slow"],
    )
    .movable(Movable::KeyNum(1)),
    info(
        "sinterstore",
        -3,
        &["write", "denyoom"],
        [1, -1, 1],
        &["@write", "@set", "@slow"],
    ),
    info(
        "sismember",
        3,
        &["readonly", "fast"],
        [1, 1, 1],
        &["@read", "@set", "@fast"],
    ),
    info("smembers", 2, &["readonly"], [1, 1, 1], &["@read", "@set", "@slow"]),
    info(
        "smismember",
        -3,
        &["readonly", "fast"],
        [1, 1, 1],
        &["@read", "@set", "@fast"],
    ),
    info("smove", 4, &["write", "fast"], [1, 2, 1], &["@write", "@set", "@fast"]),
    info("spop", -2, &["write", "fast"], [1, 1, 1], &["@write", "@set", "@fast"]),
    info("srandmember", -2, &["readonly"], [1, 1, 1], &["@read", "@set", "@slow"]),
    info("srem", -3, &["write", "fast"], [1, 1, 1], &["@write", "@set", "@fast"]),
    info("sscan", -3, &["readonly"], [1, 1, 1], &["@read", "@set", "@slow"]),
    info(
        "strlen",
        2,
        &["readonly", "fast"],
        [1, 1, 1],
        &["@read", "@string", "@fast"],
    ),
    info(
        "subscribe",
        -2,
        &["pubsub", "noscript", "loading", "stale"],
        [0, 0, 0],
        &["@pubsub", "@slow"],
    ),
    info("substr", 4, &["readonly"], [1, 1, 1], &["@read", "@string", "@slow"]),
    info("sunion", -2, &["readonly"], [1, -1, 1], &["@read", "@set", "@slow"]),
    info(
        "sunionstore",
        -3,
        &["write", "denyoom"],
        [1, -1, 1],
        &["@write", "@set", "@slow"],
    ),
    info("time", 1, &["loading", "stale", "fast"], [0, 0, 0], &["@fast"]),
    info(
        "touch",
        -2,
        &["readonly", "fast"],
        [1, -1, 1],
        &["@keyspace", "@read", "@fast"],
    ),
    info(
        "ttl",
        2,
        &["readonly", "fast"],
        [1, 1, 1],
        &["@keyspace", "@read", "@fast"],
    ),
    info(
        "type",
        2,
        &["readonly", "fast"],
        [1, 1, 1],
        &["@keyspace", "@read", "@fast"],
    ),
    info(
        "unlink",
        -2,
        &["write", "fast"],
        [1, -1, 1],
        &["@keyspace", "@write", "@fast"],
    ),
    info(
        "unsubscribe",
        -1,
        &["pubsub", "noscript", "loading", "stale"],
        [0, 0, 0],
        &["@pubsub", "@slow"],
    ),
    info(
        "unwatch",
        1,
        &["noscript", "loading", "stale", "fast", "allow_busy"],
        [0, 0, 0],
        &["@fast", "@transaction"],
    ),
    info(
        "watch",
        -2,
        &["noscript", "loading", "stale", "fast", "allow_busy"],
        [1, -1, 1],
        &["@fast", "@transaction"],
    ),
    info(
        "xadd",
        -5,
        &["write", "denyoom", "fast"],
        [1, 1, 1],
        &["@write", "@stream", "@fast"],
    ),
    info(
        "xdel",
        -3,
        &["write", "fast"],
        [1, 1, 1],
        &["@write", "@stream", "@fast"],
    ),
    info(
        "xlen",
        2,
        &["readonly", "fast"],
        [1, 1, 1],
        &["@read", "@stream", "@fast"],
    ),
    info("xrange", -4, &["readonly"], [1, 1, 1], &["@read", "@stream", "@slow"]),
    info(
        "xread",
        -4,
        &["readonly", "blocking", "movablekeys"],
        [0, 0, 0],
        &["@read", "@stream", "@slow", "@blocking"],
    )
    .movable(Movable::Keyword("STREAMS")),
    info(
        "xrevrange",
        -4,
        &["readonly"],
        [1, 1, 1],
        &["@read", "@stream", "@slow"],
    ),
    info("xtrim", -4, &["write"], [1, 1, 1], &["@write", "@stream", "@slow"]),
    info(
        "zadd",
        -4,
        &["write", "denyoom", "fast"],
        [1, 1, 1],
        &["@write", "@sortedset", "@fast"],
    ),
    info(
        "zcard",
        2,
        &["readonly", "fast"],
        [1, 1, 1],
        &["@read", "@sortedset", "@fast"],
    ),
    info(
        "zcount",
        4,
        &["readonly", "fast"],
        [1, 1, 1],
        &["@read", "@sortedset", "@fast"],
    ),
    info(
        "zincrby",
        4,
        &["write", "denyoom", "fast"],
        [1, 1, 1],
        &["@write", "@sortedset", "@fast"],
    ),
    info(
        "zlexcount",
        4,
        &["readonly", "fast"],
        [1, 1, 1],
        &["@read", "@sortedset", "@fast"],
    ),
    info(
        "zmscore",
        -3,
        &["readonly", "fast"],
        [1, 1, 1],
        &["@read", "@sortedset", "@fast"],
    ),
    info(
        "zpopmax",
        -2,
        &["write", "fast"],
        [1, 1, 1],
        &["@write", "@sortedset", "@fast"],
    ),
    info(
        "zpopmin",
        -2,
        &["write", "fast"],
        [1, 1, 1],
        &["@write", "@sortedset", "@fast"],
    ),
    info(
        "zrange",
        -4,
        &["readonly"],
        [1, 1, 1],
        &["@read", "@sortedset", "@slow"],
    ),
    info(
        "zrangebylex",
        -4,
        &["readonly"],
        [1, 1, 1],
        &["@read", "@sortedset", "@slow"],
    ),
    info(
        "zrangebyscore",
        -4,
        &["readonly"],
        [1, 1, 1],
        &["@read", "@sortedset", "@slow"],
    ),
    info(
        "zrank",
        3,
        &["readonly", "fast"],
        [1, 1, 1],
        &["@read", "@sortedset", "@fast"],
    ),
    info(
        "zrem",
        -3,
        &["write", "fast"],
        [1, 1, 1],
        &["@write", "@sortedset", "@fast"],
    ),
    info(
        "zremrangebylex",
        4,
        &["write"],
        [1, 1, 1],
        &["@write", "@sortedset", "@slow"],
    ),
    info(
        "zremrangebyrank",
        4,
        &["write"],
        [1, 1, 1],
        &["@write", "@sortedset", "@slow"],
    ),
    info(
        "zremrangebyscore",
        4,
        &["write"],
        [1, 1, 1],
        &["@write", "@sortedset", "@slow"],
    ),
    info(
        "zrevrange",
        -4,
        &["readonly"],
        [1, 1, 1],
        &["@read", "@sortedset", "@slow"],
    ),
    info(
        "zrevrangebylex",
        -4,
        &["readonly"],
        [1, 1, 1],
        &["@read", "@sortedset", "@slow"],
    ),
    info(
        "zrevrangebyscore",
        -4,
        &["readonly"],
        [1, 1, 1],
        &["@read", "@sortedset", "@slow"],
    ),
    info(
        "zrevrank",
        3,
        &["readonly", "fast"],
        [1, 1, 1],
        &["@read", "@sortedset", "@fast"],
    ),
    info("zscan", -3, &["readonly"], [1, 1, 1], &["@read", "@sortedset", "@slow"]),
    info(
        "zscore",
        3,
        &["readonly", "fast"],
        [1, 1, 1],
        &["@read", "@sortedset", "@fast"],
    ),
];

/// `COMMAND [COUNT | INFO name... | LIST | GETKEYS command arg... | DOCS name...]`.
pub(super) fn command(args: &[Vec<u8>]) -> Reply {
    let Some(sub) = args.first() else {
        return Reply::Array(INFO.iter().map(describe).collect());
    };
    match (sub.to_ascii_lowercase().as_slice(), &args[1..]) {
        (b"count", []) => Reply::Integer(INFO.len() as i64),
        (b"list", []) => Reply::Array(INFO.iter().map(|i| Reply::Bulk(Some(i.name.into()))).collect()),
        (b"info", names) => Reply::Array(
            names
                .iter()
                .map(|n| find(n).map_or(Reply::Bulk(None), describe))
                .collect(),
        ),
        (b"docs", _) => Reply::Map(Vec::new()),
        (b"getkeys", [name, rest @ ..]) => getkeys(name, rest),
        (sub @ (b"count" | b"list" | b"getkeys"), _) => Reply::error(format!(
            "wrong number of arguments for 'command|{}' command",
            String::from_utf8_lossy(sub)
        )),
        _ => Reply::error(format!(
            "unknown subcommand '{}'. Try COMMAND HELP.",
            String::from_utf8_lossy(sub)
        )),
    }
}

/// Whether a script may call the command `name` (Redis's `noscript`).
pub(super) fn allowed_in_scripts(name: &[u8]) -> bool {
    find(name).is_some_and(|i| !i.flags.contains(&"noscript"))
}

/// Whether the command `name` writes (Redis's `write`).
pub(super) fn writes(name: &[u8]) -> bool {
    find(name).is_some_and(|i| i.flags.contains(&"write"))
}

fn find(name: &[u8]) -> Option<&'static Info> {
    let name = String::from_utf8_lossy(name).to_ascii_lowercase();
    INFO.binary_search_by(|i| i.name.cmp(&name)).ok().map(|at| &INFO[at])
}

/// Whether `argc` arguments (the name included) fit the arity.
fn fits(info: &Info, argc: usize) -> bool {
    let argc = argc as i64;
    if info.arity >= 0 {
        argc == info.arity
    } else {
        argc >= -info.arity
    }
}

/// The positions of the keys in `argc` arguments (the name at 0).
fn key_positions(info: &Info, argc: usize) -> impl Iterator<Item = usize> {
    let [first, last, step] = info.keys;
    let last = if last < 0 { argc as i64 + last } else { last };
    (first..=last)
        .step_by(step.max(1) as usize)
        .filter(move |&p| first > 0 && p < argc as i64)
        .map(|p| p as usize)
}

/// The keys of the command `args` (its name first), where Redis finds
/// them; none if the command is unknown or its arguments do not fit it.
pub(super) fn keys_of(args: &[Vec<u8>]) -> Vec<&[u8]> {
    match args.split_first() {
        Some((name, rest)) => find(name)
            .filter(|info| fits(info, args.len()))
            .map(|info| keys_in(info, rest))
            .unwrap_or_default(),
        None => Vec::new(),
    }
}

/// The keys among `rest`, a command's arguments after its name.
fn keys_in<'a>(info: &Info, rest: &'a [Vec<u8>]) -> Vec<&'a [u8]> {
    let all = |keys: &'a [Vec<u8>]| keys.iter().map(Vec::as_slice).collect();
    match info.movable {
        // Keys after their count; a count that does not fit names none,
        // and a script may have none (Redis's no_mandatory_keys).
        Movable::KeyNum(at) => {
            let at = at as usize - 1;
            let count = rest
                .get(at)
                .and_then(|n| std::str::from_utf8(n).ok()?.parse::<usize>().ok());
            // A count near usize::MAX must not overflow: no sum of it.
            all(count.and_then(|n| rest.get(at + 1..)?.get(..n)).unwrap_or_default())
        }
        // Keys after the keyword: half of what follows it.
        Movable::Keyword(word) => {
            let after = rest.iter().position(|a| a.eq_ignore_ascii_case(word.as_bytes()));
            let keys = after.map(|i| &rest[i + 1..]).unwrap_or_default();
            all(&keys[..keys.len() / 2])
        }
        Movable::No => key_positions(info, rest.len() + 1)
            .map(|p| rest[p - 1].as_slice())
            .collect(),
    }
}

fn getkeys(name: &[u8], rest: &[Vec<u8>]) -> Reply {
    let Some(info) = find(name) else {
        return Reply::error("Invalid command specified");
    };
    if !fits(info, rest.len() + 1) {
        return Reply::error("Invalid number of arguments specified for command");
    }
    let keys = keys_in(info, rest);
    if keys.is_empty() && matches!(info.movable, Movable::No) {
        return Reply::error("The command has no key arguments");
    }
    Reply::Array(keys.into_iter().map(|k| Reply::Bulk(Some(k.to_vec()))).collect())
}

fn describe(info: &Info) -> Reply {
    let words = |w: &[&str]| Reply::Array(w.iter().map(|s| Reply::Simple(s.to_string())).collect());
    let bulk = |s: &str| Reply::Bulk(Some(s.into()));
    let [first, last, step] = info.keys;
    let access = if info.flags.contains(&"write") { "RW" } else { "RO" };
    let map = |pairs: &[(&str, Reply)]| Reply::Map(pairs.iter().map(|(k, v)| (bulk(k), v.clone())).collect());
    let search = |begin: Reply, find: Reply| {
        Reply::Map(vec![
            (bulk("flags"), words(&[access])),
            (bulk("begin_search"), begin),
            (bulk("find_keys"), find),
        ])
    };
    let at_index = |index: i64| {
        map(&[
            ("type", bulk("index")),
            ("spec", map(&[("index", Reply::Integer(index))])),
        ])
    };
    let range = |lastkey: i64, keystep: i64, limit: i64| {
        map(&[
            ("type", bulk("range")),
            (
                "spec",
                map(&[
                    ("lastkey", Reply::Integer(lastkey)),
                    ("keystep", Reply::Integer(keystep)),
                    ("limit", Reply::Integer(limit)),
                ]),
            ),
        ])
    };
    let spec = |index: i64, lastkey: i64, keystep: i64| search(at_index(index), range(lastkey, keystep, 0));
    let specs = match (first, last, info.movable) {
        (_, _, Movable::KeyNum(at)) => vec![search(
            at_index(at),
            map(&[
                ("type", bulk("keynum")),
                (
                    "spec",
                    map(&[
                        ("keynumidx", Reply::Integer(0)),
                        ("firstkey", Reply::Integer(1)),
                        ("keystep", Reply::Integer(1)),
                    ]),
                ),
            ]),
        )],
        (_, _, Movable::Keyword(word)) => vec![search(
            map(&[
                ("type", bulk("keyword")),
                (
                    "spec",
                    map(&[("keyword", bulk(word)), ("startfrom", Reply::Integer(1))]),
                ),
            ]),
            range(-1, 1, 2),
        )],
        (0, ..) => Vec::new(),
        // A destination, then sources up to the end (SINTERSTORE): one
        // specification for each part, as Redis gives them.
        (1, -1, _) if info.name.ends_with("store") => vec![spec(1, 0, 1), spec(2, -1, 1)],
        // Keys up to the end: one range (Redis counts its last key from
        // the end of the command).
        (_, last, _) if last < 0 => vec![spec(first, last, step)],
        // A fixed set of keys (LMOVE's source and destination): one
        // specification each, as Redis gives them.
        _ => (first..=last)
            .step_by(step.max(1) as usize)
            .map(|i| spec(i, 0, 1))
            .collect(),
    };
    Reply::Array(vec![
        bulk(info.name),
        Reply::Integer(info.arity),
        words(info.flags),
        Reply::Integer(first),
        Reply::Integer(last),
        Reply::Integer(step),
        words(info.categories),
        Reply::Array(Vec::new()),
        Reply::Array(specs),
        Reply::Array(Vec::new()),
    ])
}

#[cfg(test)]
mod tests {
    use super::super::COMMANDS;
    use super::*;

    #[test]
    fn every_command_is_described_and_its_arity_agrees() {
        let names: Vec<&str> = INFO.iter().map(|i| i.name).collect();
        let table: Vec<&str> = COMMANDS.iter().map(|c| c.name).collect();
        assert_eq!(names, table, "INFO follows the command table");
        for (info, c) in INFO.iter().zip(COMMANDS) {
            for n in 0..12 {
                // The table may refuse more (pairs), never accept what the arity refuses.
                assert!(!(c.arity)(n) || fits(info, n + 1), "{} with {n} arguments", info.name);
            }
        }
    }

    #[test]
    fn keys_are_found_where_redis_finds_them() {
        let args = |w: &[&str]| w.iter().map(|s| s.as_bytes().to_vec()).collect::<Vec<_>>();
        let keys = |r: Reply| match r {
            Reply::Array(k) => k,
            other => panic!("{other:?}"),
        };
        assert_eq!(keys(getkeys(b"MSET", &args(&["a", "1", "b", "2"]))).len(), 2);
        assert_eq!(
            getkeys(b"del", &args(&["a", "b", "c"])),
            Reply::Array(["a", "b", "c"].map(|k| Reply::Bulk(Some(k.into()))).to_vec())
        );
        assert_eq!(
            getkeys(b"ping", &args(&["x"])),
            Reply::error("The command has no key arguments")
        );
        assert_eq!(
            getkeys(b"get", &args(&["a", "b"])),
            Reply::error("Invalid number of arguments specified for command")
        );
        assert_eq!(getkeys(b"nosuch", &[]), Reply::error("Invalid command specified"));
        // EVAL's keys follow their count; a bad count names none.
        assert_eq!(
            getkeys(b"eval", &args(&["return 1", "2", "a", "b", "c"])),
            Reply::Array(["a", "b"].map(|k| Reply::Bulk(Some(k.into()))).to_vec())
        );
        let huge = usize::MAX.to_string();
        for bad in [
            &["x", "5", "a"][..],
            &["x", "0"],
            &["x", "abc", "a"],
            &["x", "-1", "a"],
            &["x", &huge, "a"],
        ] {
            assert_eq!(getkeys(b"evalsha", &args(bad)), Reply::Array(Vec::new()), "{bad:?}");
        }
        // What a script's command is checked by on a shard: the same keys.
        assert_eq!(keys_of(&args(&["sintercard", "2", "a", "b"])), [b"a", b"b"]);
        assert!(keys_of(&args(&["sintercard", &huge, "a"])).is_empty());
        assert!(
            keys_of(&args(&["get"])).is_empty(),
            "arguments that do not fit name no key"
        );
    }
}
