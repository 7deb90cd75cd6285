//! What a Redis command means for admission, and for naming its tenant:
//! most commands are one request each; a transaction is one
//! request, admitted at its EXEC; blocking commands, SUBSCRIBE and MONITOR
//! pass through outside admission; AUTH, HELLO and CLIENT SETNAME may name
//! the tenant; CLIENT REPLY and QUIT are the proxy's to answer.
//!
//! Blocking commands bypass the gate because a client blocked for minutes
//! would otherwise hold one of the P slots and stall everyone else; for the
//! same reason MULTI and the commands it queues take no slot (the server
//! only queues them), and the slot is taken by EXEC, which runs them.
//! Commands that observe or control the server rather than its data (INFO,
//! CLIENT, SCRIPT KILL, FUNCTION KILL) bypass it too: they take no time in
//! the server, and may be what ends the work holding every slot (CLIENT
//! UNPAUSE after CLIENT PAUSE, SCRIPT KILL of a script that loops), so they
//! must not wait behind it. SYNC and PSYNC (a replica through the proxy)
//! turn the connection into a stream, as SUBSCRIBE does.

use std::ops::Range;

/// A command's arguments: ranges (from [`sluice_resp::CommandParser`]) into
/// the command's bytes, looked at without copying.
#[derive(Clone, Copy, Debug)]
pub struct Args<'a, 'r> {
    command: &'a [u8],
    ranges: &'r [Range<usize>],
}

impl<'a, 'r> Args<'a, 'r> {
    pub fn new(command: &'a [u8], ranges: &'r [Range<usize>]) -> Self {
        Args { command, ranges }
    }

    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    pub fn get(&self, i: usize) -> Option<&'a [u8]> {
        self.ranges.get(i).and_then(|r| self.command.get(r.clone()))
    }
}

/// The role of one command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind<'a> {
    /// An ordinary command: one request.
    Plain,
    /// Starts a transaction; the server queues what follows until EXEC.
    Multi,
    /// Runs the open transaction: its one request.
    Exec,
    /// Drops the open transaction: DISCARD, or RESET (`reset`), which
    /// also turns replies back on.
    EndTx { reset: bool },
    /// `CLIENT REPLY ON|OFF|SKIP`: which replies the client wants.
    Reply(ReplyMode),
    /// Ends the connection once every earlier reply is delivered.
    Quit,
    /// May block for a long time: passes through outside admission.
    Blocking,
    /// Observes or controls the server: passes through outside admission.
    Control,
    /// SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE or MONITOR: from here on the
    /// connection is a stream and passes through outside admission.
    Stream,
    /// Names the client: AUTH's user, HELLO's AUTH user and SETNAME, or
    /// CLIENT SETNAME's name. A plain request otherwise.
    Names {
        user: Option<&'a [u8]>,
        name: Option<&'a [u8]>,
    },
}

/// Which replies a client wants (`CLIENT REPLY`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyMode {
    On,
    Off,
    /// None for the next command, then on again.
    Skip,
}

fn is(arg: Option<&[u8]>, name: &str) -> bool {
    arg.is_some_and(|a| a.eq_ignore_ascii_case(name.as_bytes()))
}

/// Classifies a command from its arguments (the first is the name).
pub fn classify<'a>(args: Args<'a, '_>) -> Kind<'a> {
    let Some(name) = args.get(0) else {
        return Kind::Plain;
    };
    let upper = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
    const BLOCKING: [&str; 10] = [
        "BLPOP",
        "BRPOP",
        "BLMOVE",
        "BRPOPLPUSH",
        "BZPOPMIN",
        "BZPOPMAX",
        "BLMPOP",
        "BZMPOP",
        "WAIT",
        "WAITAOF",
    ];
    const STREAM: [&str; 6] = ["SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "MONITOR", "SYNC", "PSYNC"];
    let kill = || is(args.get(1), "KILL");
    if BLOCKING.iter().any(|n| upper(n)) {
        Kind::Blocking
    } else if upper("INFO") || (upper("SCRIPT") || upper("FUNCTION")) && kill() {
        Kind::Control
    } else if STREAM.iter().any(|n| upper(n)) {
        Kind::Stream
    } else if upper("XREAD") || upper("XREADGROUP") {
        xread(args)
    } else if upper("MULTI") {
        Kind::Multi
    } else if upper("EXEC") {
        Kind::Exec
    } else if upper("DISCARD") || upper("RESET") {
        Kind::EndTx { reset: upper("RESET") }
    } else if upper("QUIT") {
        Kind::Quit
    } else if upper("AUTH") {
        auth(args)
    } else if upper("HELLO") {
        hello(args)
    } else if upper("CLIENT") && is(args.get(1), "SETNAME") {
        Kind::Names {
            user: None,
            name: args.get(2),
        }
    } else if upper("CLIENT") && is(args.get(1), "REPLY") && args.len() == 3 {
        client_reply(args.get(2))
    } else if upper("CLIENT") {
        Kind::Control
    } else {
        Kind::Plain
    }
}

/// Whether a command neither reads nor changes the state of its connection
/// (database, user, protocol, name, transaction, tracking, blocking,
/// subscriptions), so that any connection in the default state answers it
/// as the client's own would. A list of what is known to be so: a command
/// not listed is treated as stateful.
pub fn shareable(args: Args<'_, '_>) -> bool {
    let Some(name) = args.get(0) else {
        return false;
    };
    let mut upper = [0u8; 16];
    let Some(upper) = upper.get_mut(..name.len()) else {
        return false;
    };
    upper.copy_from_slice(name);
    upper.make_ascii_uppercase();
    matches!(
        &*upper,
        b"GET"
            | b"SET"
            | b"SETNX"
            | b"SETEX"
            | b"PSETEX"
            | b"GETSET"
            | b"GETDEL"
            | b"GETEX"
            | b"MGET"
            | b"MSET"
            | b"MSETNX"
            | b"DEL"
            | b"UNLINK"
            | b"EXISTS"
            | b"TYPE"
            | b"TTL"
            | b"PTTL"
            | b"EXPIRE"
            | b"PEXPIRE"
            | b"EXPIREAT"
            | b"PEXPIREAT"
            | b"PERSIST"
            | b"INCR"
            | b"DECR"
            | b"INCRBY"
            | b"DECRBY"
            | b"INCRBYFLOAT"
            | b"APPEND"
            | b"STRLEN"
            | b"GETRANGE"
            | b"SETRANGE"
            | b"SETBIT"
            | b"GETBIT"
            | b"BITCOUNT"
            | b"HGET"
            | b"HSET"
            | b"HSETNX"
            | b"HMGET"
            | b"HMSET"
            | b"HDEL"
            | b"HGETALL"
            | b"HKEYS"
            | b"HVALS"
            | b"HLEN"
            | b"HEXISTS"
            | b"HINCRBY"
            | b"HINCRBYFLOAT"
            | b"HSTRLEN"
            | b"HSCAN"
            | b"LPUSH"
            | b"RPUSH"
            | b"LPUSHX"
            | b"RPUSHX"
            | b"LPOP"
            | b"RPOP"
            | b"LLEN"
            | b"LRANGE"
            | b"LINDEX"
            | b"LSET"
            | b"LREM"
            | b"LTRIM"
            | b"LINSERT"
            | b"LPOS"
            | b"LMOVE"
            | b"RPOPLPUSH"
            | b"SADD"
            | b"SREM"
            | b"SMEMBERS"
            | b"SISMEMBER"
            | b"SMISMEMBER"
            | b"SCARD"
            | b"SPOP"
            | b"SRANDMEMBER"
            | b"SINTER"
            | b"SUNION"
            | b"SDIFF"
            | b"SSCAN"
            | b"ZADD"
            | b"ZREM"
            | b"ZRANGE"
            | b"ZREVRANGE"
            | b"ZRANGEBYSCORE"
            | b"ZREVRANGEBYSCORE"
            | b"ZRANGEBYLEX"
            | b"ZSCORE"
            | b"ZMSCORE"
            | b"ZCARD"
            | b"ZCOUNT"
            | b"ZINCRBY"
            | b"ZRANK"
            | b"ZREVRANK"
            | b"ZPOPMIN"
            | b"ZPOPMAX"
            | b"ZSCAN"
            | b"XADD"
            | b"XLEN"
            | b"XRANGE"
            | b"XREVRANGE"
            | b"PFADD"
            | b"PFCOUNT"
            | b"PING"
            | b"ECHO"
            | b"SCAN"
            | b"KEYS"
            | b"DBSIZE"
            | b"TIME"
    )
}

/// XREAD and XREADGROUP block only with a BLOCK option, which comes before
/// STREAMS (after STREAMS every argument is a key or an id).
fn xread<'a>(args: Args<'a, '_>) -> Kind<'a> {
    let mut options = (1..args.len()).map(|i| args.get(i)).take_while(|a| !is(*a, "STREAMS"));
    if options.any(|a| is(a, "BLOCK")) {
        Kind::Blocking
    } else {
        Kind::Plain
    }
}

/// A mode Redis does not know is left for the server to refuse.
fn client_reply<'a>(mode: Option<&[u8]>) -> Kind<'a> {
    if is(mode, "ON") {
        Kind::Reply(ReplyMode::On)
    } else if is(mode, "OFF") {
        Kind::Reply(ReplyMode::Off)
    } else if is(mode, "SKIP") {
        Kind::Reply(ReplyMode::Skip)
    } else {
        Kind::Plain
    }
}

/// `AUTH password` authenticates the user "default"; `AUTH user password`
/// names the user.
fn auth<'a>(args: Args<'a, '_>) -> Kind<'a> {
    let user = match args.len() {
        3 => args.get(1),
        _ => Some(&b"default"[..]),
    };
    Kind::Names { user, name: None }
}

/// `HELLO [protover [AUTH user password] [SETNAME name]]`.
fn hello<'a>(args: Args<'a, '_>) -> Kind<'a> {
    let mut user = None;
    let mut name = None;
    let mut i = 2;
    while i < args.len() {
        if is(args.get(i), "AUTH") {
            user = args.get(i + 1);
            i += 3;
        } else if is(args.get(i), "SETNAME") {
            name = args.get(i + 1);
            i += 2;
        } else {
            i += 1;
        }
    }
    Kind::Names { user, name }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(line: &str) -> Kind<'_> {
        let mut parser = sluice_resp::CommandParser::default();
        let inline = format!("{line}\r\n");
        assert!(parser.parse(inline.as_bytes()).unwrap().is_some());
        classify(Args::new(line.as_bytes(), parser.args()))
    }

    #[test]
    fn blocking_commands_and_streams_are_recognised_in_any_case() {
        assert_eq!(kind("blpop q 0"), Kind::Blocking);
        assert_eq!(kind("BZMPOP 1 1 z MIN"), Kind::Blocking);
        assert_eq!(kind("WAIT 1 0"), Kind::Blocking);
        assert_eq!(kind("Subscribe ch"), Kind::Stream);
        assert_eq!(kind("MONITOR"), Kind::Stream);
        assert_eq!(kind("LPOP q"), Kind::Plain);
    }

    #[test]
    fn xread_blocks_only_with_block_before_streams() {
        assert_eq!(kind("XREAD COUNT 1 BLOCK 0 STREAMS s $"), Kind::Blocking);
        assert_eq!(kind("XREADGROUP GROUP g c BLOCK 10 STREAMS s >"), Kind::Blocking);
        assert_eq!(kind("XREAD STREAMS BLOCK 0"), Kind::Plain, "BLOCK is a stream key here");
        assert_eq!(kind("XREAD COUNT 1 STREAMS s 0"), Kind::Plain);
    }

    #[test]
    fn only_stateless_commands_are_shareable() {
        let share = |line: &str| {
            let mut parser = sluice_resp::CommandParser::default();
            let inline = format!("{line}\r\n");
            assert!(parser.parse(inline.as_bytes()).unwrap().is_some());
            shareable(Args::new(line.as_bytes(), parser.args()))
        };
        for yes in ["get k", "SET k v", "Mget a b", "PING", "hset h f v", "ZADD z 1 m"] {
            assert!(share(yes), "{yes}");
        }
        for no in [
            "SELECT 1",
            "AUTH pw",
            "HELLO 3",
            "CLIENT SETNAME x",
            "MULTI",
            "WATCH k",
            "BLPOP q 0",
            "SUBSCRIBE c",
            "READONLY",
            "RESET",
            "A_COMMAND_NAME_LONGER_THAN_16",
        ] {
            assert!(!share(no), "{no}");
        }
    }

    #[test]
    fn transactions() {
        assert_eq!(kind("multi"), Kind::Multi);
        assert_eq!(kind("EXEC"), Kind::Exec);
        assert_eq!(kind("DISCARD"), Kind::EndTx { reset: false });
        assert_eq!(kind("RESET"), Kind::EndTx { reset: true });
    }

    #[test]
    fn client_reply_and_quit_are_the_proxys() {
        assert_eq!(kind("client reply off"), Kind::Reply(ReplyMode::Off));
        assert_eq!(kind("CLIENT REPLY SKIP"), Kind::Reply(ReplyMode::Skip));
        assert_eq!(kind("CLIENT REPLY On"), Kind::Reply(ReplyMode::On));
        assert_eq!(kind("CLIENT REPLY maybe"), Kind::Plain, "the server refuses it");
        assert_eq!(kind("quit"), Kind::Quit);
    }

    #[test]
    fn commands_that_observe_or_control_the_server_pass_outside_admission() {
        for control in [
            "INFO",
            "info stats",
            "CLIENT UNPAUSE",
            "client list",
            "SCRIPT KILL",
            "function kill",
        ] {
            assert_eq!(kind(control), Kind::Control, "{control}");
        }
        assert_eq!(kind("SCRIPT LOAD x"), Kind::Plain);
        assert_eq!(kind("SYNC"), Kind::Stream);
        assert_eq!(kind("psync ? -1"), Kind::Stream);
    }

    #[test]
    fn auth_hello_and_setname_name_the_client() {
        let names = |user: Option<&'static str>, name: Option<&'static str>| Kind::Names {
            user: user.map(str::as_bytes),
            name: name.map(str::as_bytes),
        };
        assert_eq!(kind("AUTH alice secret"), names(Some("alice"), None));
        assert_eq!(kind("AUTH secret"), names(Some("default"), None));
        assert_eq!(kind("HELLO 3 AUTH bob pw SETNAME web"), names(Some("bob"), Some("web")));
        assert_eq!(kind("HELLO 3"), names(None, None));
        assert_eq!(kind("CLIENT SETNAME web"), names(None, Some("web")));
        assert_eq!(kind("CLIENT LIST"), Kind::Control);
    }
}
