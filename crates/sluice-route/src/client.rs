//! A client's connection to the router: requests read, answered in order.
//!
//! Commands that concern only the connection (PING, HELLO, SELECT 0,
//! CLIENT ...) are answered here, and a transaction is queued here from
//! MULTI to EXEC; every other command goes to the [`Router`]. A `WATCH`
//! reserves a connection to its keys' shard for the client
//! ([`Router::reserve`]), on which the shard keeps the watch and which the
//! transaction then runs on, so that the shard's own optimistic lock
//! decides, as it would for a client connected to it directly.
//!
//! A pipelined client's commands that each go to one slot are gathered
//! into runs ([`Router::execute_run`]): a run's commands bound for one
//! shard go to it together, in the client's order, so that the shard runs a
//! key's commands in the order sent and a pipeline costs a round trip a
//! run, not one a command. Commands to different shards run at once, in no
//! set order between them, as in a Redis Cluster client's pipeline; any
//! other command (a split MGET, a transaction, the connection's own) ends
//! the run before it and runs on its own. The replies are written in the
//! client's order, together. Each client
//! has its own task and buffers: a client that stops reading holds only
//! its own task, and a malformed request closes only its own connection,
//! with the error named.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sluice_resp::{parse_reply, request_context, CommandParser, Limits, ProtocolError, Reply, RequestParser};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::command::{keys_of, route, Route};
use crate::router::{Answer, Origin, Router, Watched};

/// Connection ids, for `CLIENT ID`.
static NEXT_CLIENT: AtomicU64 = AtomicU64::new(1);

/// What a queued argument costs beside its bytes: its vector and its
/// header on the wire to the shard.
const ARGUMENT_OVERHEAD: usize = 32;

/// How many of a client's pipelined commands go to their shards together
/// in a run: at most `MAX_RUN`, `FIRST_RUN` at first. A run's replies are
/// held until all of them are in, so a client's runs grow from `FIRST_RUN`
/// while their replies stay within `RUN_BYTES` and fall back to one
/// command once they do not: a pipeline of large values is answered one
/// reply at a time, as before runs. The router holds at most `MAX_RUN`
/// replies of a client at once (each copied up to three times while its
/// run is answered), and that many large ones only once: a client that
/// turns from small values to large ones, whose next run is long.
const MAX_RUN: usize = 128;
const FIRST_RUN: usize = 8;
const RUN_BYTES: usize = 1 << 20;

/// A pipeline's replies are written once this many bytes are pending,
/// so that a long pipeline does not buffer all its replies.
const FLUSH_AT: usize = 64 << 10;

struct Session {
    id: u64,
    resp3: bool,
    name: Option<Vec<u8>>,
    quit: bool,
    /// The transaction being queued, between MULTI and EXEC.
    transaction: Option<Transaction>,
    /// Bytes a transaction's commands may take: it goes to its shard whole
    /// at EXEC, one request, bounded as a request is (`max_request_mb`).
    max_transaction: usize,
    /// The client's watch, from WATCH to EXEC, DISCARD or UNWATCH.
    watched: Option<Watched>,
    /// Commands the client's next run may take (see [`MAX_RUN`]).
    run_limit: usize,
}

impl Session {
    /// Ends the client's watch, if any, without an EXEC.
    fn unwatch(&mut self) {
        if let Some(w) = self.watched.take() {
            w.release(false);
        }
    }
}

/// A request framed in a client's read buffer.
enum Request<'b> {
    /// An array's arguments, borrowed from the buffer.
    Array(Vec<&'b [u8]>),
    /// An inline command's, resolved.
    Inline(Vec<Vec<u8>>),
}

/// A client's requests, framed where they lie in its read buffer: an
/// array's arguments are borrowed from it, not copied (a hundred-key MGET
/// would otherwise cost a hundred allocations before it is routed); an
/// inline command's are resolved, since its quotes and escapes must go
/// before the command is sent on as an array.
struct Requests {
    arrays: CommandParser,
    inline: RequestParser,
    limits: Limits,
}

impl Requests {
    fn new(limits: Limits) -> Requests {
        Requests {
            arrays: CommandParser::new(limits),
            inline: RequestParser::default(),
            limits,
        }
    }

    /// The request at the front of `buf` and the bytes it took, or `None`
    /// until all of it is there; after `None` the next call passes the
    /// same bytes and more.
    fn next<'b>(&mut self, buf: &'b [u8]) -> Result<Option<(Request<'b>, usize)>, ProtocolError> {
        if buf.first() == Some(&b'*') {
            let Some(used) = self.arrays.parse(buf)? else {
                return Ok(None);
            };
            let args = self.arrays.args().iter().map(|r| &buf[r.clone()]).collect();
            return Ok(Some((Request::Array(args), used)));
        }
        let parsed = self.inline.parse(buf, &self.limits)?;
        Ok(parsed.map(|(args, used)| (Request::Inline(args), used)))
    }
}

/// A client's pipelined commands that go to their shards together
/// ([`Router::execute_run`]): each with its name and route.
type Run<'b> = Vec<(String, Route, Vec<&'b [u8]>)>;

/// Commands queued since MULTI. They run on one shard, so their keys must
/// share a slot (a shard, outside cluster mode) with the first key queued.
#[derive(Default)]
struct Transaction {
    queued: Vec<Vec<Vec<u8>>>,
    /// The queued commands' bytes, as [`Session::max_transaction`] counts them.
    bytes: usize,
    first_key: Option<Vec<u8>>,
    /// A command was refused while queueing: EXEC answers EXECABORT, as
    /// Redis does.
    refused: bool,
}

/// Serves one client until it leaves or breaks the protocol.
pub async fn serve_client(router: Arc<Router>, mut stream: TcpStream, limits: Limits) {
    let _ = stream.set_nodelay(true);
    let mut session = Session {
        id: NEXT_CLIENT.fetch_add(1, Ordering::Relaxed),
        resp3: false,
        name: None,
        quit: false,
        transaction: None,
        max_transaction: limits.max_bulk,
        watched: None,
        run_limit: FIRST_RUN,
    };
    let mut input: Vec<u8> = Vec::with_capacity(4096);
    let mut output: Vec<u8> = Vec::new();
    let mut requests = Requests::new(limits);
    loop {
        let mut used = 0;
        let mut run: Run = Vec::new();
        loop {
            let (request, n) = match requests.next(&input[used..]) {
                Ok(Some(parsed)) => parsed,
                Ok(None) => break,
                Err(e) => {
                    answer_run(&router, &mut session, &mut run, &mut output).await;
                    Reply::Error(format!("ERR {e}")).encode(&mut output);
                    let _ = stream.write_all(&output).await;
                    return;
                }
            };
            used += n;
            match request {
                Request::Array(args) => match joins_a_run(&session, &args) {
                    Some((name, route)) => {
                        run.push((name, route, args));
                        if run.len() < session.run_limit {
                            continue;
                        }
                        answer_run(&router, &mut session, &mut run, &mut output).await;
                    }
                    None => {
                        answer_run(&router, &mut session, &mut run, &mut output).await;
                        answer_one(&router, &mut session, &args, &mut output).await;
                    }
                },
                Request::Inline(resolved) => {
                    answer_run(&router, &mut session, &mut run, &mut output).await;
                    let args: Vec<&[u8]> = resolved.iter().map(Vec::as_slice).collect();
                    answer_one(&router, &mut session, &args, &mut output).await;
                }
            }
            if session.quit {
                let _ = stream.write_all(&output).await;
                return;
            }
            if output.len() >= FLUSH_AT {
                if stream.write_all(&output).await.is_err() {
                    return;
                }
                output.clear();
            }
        }
        answer_run(&router, &mut session, &mut run, &mut output).await;
        input.drain(..used);
        if !output.is_empty() {
            if stream.write_all(&output).await.is_err() {
                return;
            }
            output.clear();
        }
        // A request's arguments are bounded one by one; the whole request
        // is bounded here, so that a client announcing many large
        // arguments cannot make the router buffer without end.
        if input.len() > limits.max_bulk.saturating_add(1 << 20) {
            let mut out = Vec::new();
            Reply::error(format!(
                "Protocol error: request larger than {} MiB",
                limits.max_bulk >> 20
            ))
            .encode(&mut out);
            let _ = stream.write_all(&out).await;
            return;
        }
        if input.capacity() - input.len() < 1024 {
            input.reserve(16 << 10);
        }
        match stream.read_buf(&mut input).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// The command `args`, if it may join a run of pipelined commands: one
/// bound for one slot, outside a transaction, with no request context of
/// its own. Its name, in lower case, and route.
fn joins_a_run(session: &Session, args: &[&[u8]]) -> Option<(String, Route)> {
    if session.transaction.is_some() {
        return None;
    }
    let name = String::from_utf8_lossy(args.first()?).to_lowercase();
    let route = route(&name);
    route.one_slot().then_some((name, route))
}

/// Answers the commands of `run`, emptied, into `output`: one alone as
/// every command is answered ([`answer_one`]), several together
/// ([`Router::execute_run`]).
async fn answer_run(router: &Router, session: &mut Session, run: &mut Run<'_>, output: &mut Vec<u8>) {
    let before = output.len();
    match run.as_slice() {
        [] => {}
        [(_, _, args)] => answer_one(router, session, args, output).await,
        commands => {
            let origin = router.origin(session.name.as_deref(), None);
            let routed: Vec<(&str, Route, &[&[u8]])> = commands
                .iter()
                .map(|(name, route, args)| (name.as_str(), *route, args.as_slice()))
                .collect();
            let answers = router.execute_run(&routed, origin).await;
            for ((_, _, args), answer) in commands.iter().zip(answers) {
                encode(answer, args, session.resp3, output);
            }
        }
    }
    if !run.is_empty() {
        session.run_limit = next_run_limit(session.run_limit, output.len() - before);
    }
    run.clear();
}

/// The commands a client's next run may take, after a run whose replies
/// took `replied` bytes (see [`MAX_RUN`]).
fn next_run_limit(limit: usize, replied: usize) -> usize {
    match replied {
        0..=RUN_BYTES => (limit * 2).min(MAX_RUN),
        _ => 1,
    }
}

/// Answers the command `args` into `output`.
async fn answer_one(router: &Router, session: &mut Session, args: &[&[u8]], output: &mut Vec<u8>) {
    if !args.is_empty() {
        let answer = answer(router, session, args).await;
        encode(answer, args, session.resp3, output);
    }
}

/// `answer` to `args` in the client's protocol.
fn encode(answer: Answer, args: &[&[u8]], resp3: bool, output: &mut Vec<u8>) {
    match answer {
        Answer::Raw(raw) if !resp3 => output.extend_from_slice(&raw),
        Answer::Raw(raw) => self::resp3(args, &raw).encode_as(output, true),
        Answer::Reply(reply) => reply.encode_as(output, resp3),
    }
}

/// A shard's RESP2 reply to `args` as a RESP3 client expects it, the
/// shapes Redis 7 gives in RESP3 ([`shape`]).
fn resp3(args: &[&[u8]], raw: &[u8]) -> Reply {
    match parse_reply(raw, &Limits::relay()) {
        Ok(Some((reply, _))) => shape(args, reply),
        _ => Reply::error("a shard's reply does not parse"),
    }
}

/// A transaction's RESP2 reply, each command's reply in its RESP3 shape.
fn exec_resp3(queued: &[Vec<Vec<u8>>], raw: &[u8]) -> Reply {
    match parse_reply(raw, &Limits::relay()) {
        Ok(Some((Reply::Array(replies), _))) if replies.len() == queued.len() => {
            let shaped = replies.into_iter().zip(queued).map(|(reply, command)| {
                let args: Vec<&[u8]> = command.iter().map(Vec::as_slice).collect();
                shape(&args, reply)
            });
            Reply::Array(shaped.collect())
        }
        // A null (a watched key changed) or an error: nothing to shape.
        Ok(Some((other, _))) => other,
        _ => Reply::error("a shard's reply does not parse"),
    }
}

/// The RESP3 shape of a reply to `args` that a shard gave in RESP2: nulls
/// as nulls, HGETALL's pairs as a map, a set's members as a set, scores as
/// doubles, and WITHSCORES or ZPOPMIN's count as [member, score] pairs
/// (what redis-py, RESP3 by default, unpacks: left flat, it reads every
/// other element and loses the rest).
fn shape(args: &[&[u8]], reply: Reply) -> Reply {
    let name = args[0].to_ascii_lowercase();
    let has = |word: &[u8]| args[1..].iter().any(|a| a.eq_ignore_ascii_case(word));
    match (name.as_slice(), reply) {
        (b"hgetall", Reply::Array(items)) => Reply::Map(pairs(items)),
        (b"smembers" | b"sinter" | b"sunion" | b"sdiff" | b"spop", Reply::Array(items)) => Reply::Set(items),
        (b"zscore" | b"zincrby", r) => as_double(r),
        (b"zadd", r) if has(b"incr") => as_double(r),
        (b"zmscore", Reply::Array(items)) => Reply::Array(items.into_iter().map(as_double).collect()),
        // WITHSCORES, and ZPOPMIN's count: [member, score] pairs.
        (b"zrange" | b"zrangebyscore" | b"zrevrange" | b"zrevrangebyscore", Reply::Array(items))
            if has(b"withscores") =>
        {
            scored_pairs(items)
        }
        (b"zpopmin" | b"zpopmax", Reply::Array(items)) if args.len() > 2 => scored_pairs(items),
        // Without a count, one member and its score, flat.
        (b"zpopmin" | b"zpopmax", Reply::Array(mut items)) if items.len() == 2 => {
            let score = items.pop().map(as_double).expect("two items");
            items.push(score);
            Reply::Array(items)
        }
        (_, other) => other,
    }
}

/// A flat member, score, ... array as [member, score] pairs, each score a
/// double.
fn scored_pairs(items: Vec<Reply>) -> Reply {
    let scored = pairs(items)
        .into_iter()
        .map(|(m, s)| Reply::Array(vec![m, as_double(s)]));
    Reply::Array(scored.collect())
}

/// A score a shard sent as a bulk string, as the double RESP3 has for it.
fn as_double(r: Reply) -> Reply {
    match r {
        Reply::Bulk(Some(text)) => Reply::Double(text),
        other => other,
    }
}

/// A flat array's elements two by two.
fn pairs(items: Vec<Reply>) -> Vec<(Reply, Reply)> {
    let mut items = items.into_iter();
    let mut pairs = Vec::new();
    while let (Some(k), Some(v)) = (items.next(), items.next()) {
        pairs.push((k, v));
    }
    pairs
}

async fn answer(router: &Router, session: &mut Session, args: &[&[u8]]) -> Answer {
    // A context the client sent: its budget counts (tightening its
    // tenant's), its tenant names whose work it is; the id is the
    // router's to give, in its own arrival order.
    let (args, sent) = match request_context::unwrap(args) {
        Ok(None) => (args, None),
        Ok(Some(sent)) if sent.ios.is_some() => return Reply::error(
            "SLUICE.WITH: sluice route does not take IOS: the parts it splits a request into are requests of their own",
        )
        .into(),
        Ok(Some(sent)) => (sent.command, Some((sent.budget, sent.tenant))),
        Err(e) => return Reply::error(e).into(),
    };
    let name = String::from_utf8_lossy(args[0]).to_lowercase();
    let (budget, tenant) = sent.unwrap_or((None, None));
    let origin = router.origin(tenant.or(session.name.as_deref()), budget);
    let queueing = session.transaction.is_some() && !matches!(name.as_str(), "quit" | "reset");
    if matches!(name.as_str(), "multi" | "exec" | "discard" | "watch" | "unwatch") || queueing {
        return transaction(router, session, &name, args, origin).await;
    }
    match route(&name) {
        Route::Local if sent.is_some() => Reply::error(format!(
            "SLUICE.WITH: '{name}' concerns the connection alone and takes no request context"
        ))
        .into(),
        Route::Local => local(router, session, &name, args).into(),
        other => router.execute(&name, other, args, origin).await,
    }
}

/// MULTI, EXEC, DISCARD, WATCH, UNWATCH, and the commands queued between:
/// the transaction's keys (and the watched ones) must share a slot, and it
/// is sent whole to their shard at EXEC ([`Router::transaction`]), on the
/// watch's connection if the client watches ([`Router::on_watched`]).
async fn transaction(router: &Router, session: &mut Session, name: &str, args: &[&[u8]], origin: Origin) -> Answer {
    let Some(t) = session.transaction.as_mut() else {
        return match name {
            "multi" => {
                session.transaction = Some(Transaction {
                    first_key: session.watched.as_ref().map(|w| w.key.clone()),
                    ..Transaction::default()
                });
                Reply::ok().into()
            }
            "exec" => Reply::error("EXEC without MULTI").into(),
            "discard" => Reply::error("DISCARD without MULTI").into(),
            "watch" => watch(router, session, args, origin).await,
            _ if args.len() > 1 => Reply::error("wrong number of arguments for 'unwatch' command").into(),
            _ => {
                session.unwatch();
                Reply::ok().into()
            }
        };
    };
    match name {
        "multi" => return Reply::error("MULTI calls can not be nested").into(),
        // Refused without aborting the transaction, as Redis 7 refuses it.
        "watch" => return Reply::error("WATCH inside MULTI is not allowed").into(),
        "discard" => {
            session.transaction = None;
            session.unwatch();
            return Reply::ok().into();
        }
        "exec" => {
            let t = session.transaction.take().expect("inside MULTI");
            let mut watched = session.watched.take();
            if t.refused {
                if let Some(w) = watched {
                    w.release(false);
                }
                return Reply::Error("EXECABORT Transaction discarded because of previous errors.".into()).into();
            }
            // With a watch, even an empty transaction goes to the shard:
            // its EXEC answers whether a watched key changed.
            if t.queued.is_empty() && watched.is_none() {
                return Reply::Array(Vec::new()).into();
            }
            let slot = t.first_key.as_deref().map_or(0, sluice_resp::slot::slot);
            let answer = router.transaction(slot, &t.queued, origin, watched.as_mut()).await;
            if let Some(w) = watched {
                w.release(true);
            }
            return match answer {
                Answer::Raw(raw) if session.resp3 => Answer::Reply(exec_resp3(&t.queued, &raw)),
                other => other,
            };
        }
        _ => {}
    }
    let refused = |t: &mut Transaction, reply: Reply| {
        t.refused = true;
        Answer::from(reply)
    };
    let keys = match keys_of(name, route(name), args) {
        Ok(keys) => keys,
        Err(why) => return refused(t, Reply::Error(format!("ERR {why}"))),
    };
    let together = t.first_key.iter().map(Vec::as_slice).chain(keys.iter().copied());
    if let Err(crossslot) = router.place(together) {
        return refused(t, crossslot);
    }
    if t.first_key.is_none() {
        t.first_key = keys.first().map(|k| k.to_vec());
    }
    // A transaction EXEC will abort keeps nothing more: a client cannot
    // grow the router past a refusal by going on queueing.
    if t.refused {
        return Reply::Simple("QUEUED".into()).into();
    }
    t.bytes += args.iter().map(|a| a.len() + ARGUMENT_OVERHEAD).sum::<usize>();
    if t.bytes > session.max_transaction {
        t.queued = Vec::new();
        return refused(
            t,
            Reply::Error(format!(
                "ERR transaction larger than {} MiB (max_request_mb): it goes to its shard as one request at EXEC; discarded",
                session.max_transaction >> 20
            )),
        );
    }
    t.queued.push(args.iter().map(|a| a.to_vec()).collect());
    Reply::Simple("QUEUED".into()).into()
}

/// `WATCH key...`: on the connection reserved for the client's watch, the
/// keys sharing a slot with any it watches already.
async fn watch(router: &Router, session: &mut Session, args: &[&[u8]], origin: Origin) -> Answer {
    if args.len() < 2 {
        return Reply::error("wrong number of arguments for 'watch' command").into();
    }
    let keys = &args[1..];
    let together = session
        .watched
        .iter()
        .map(|w| w.key.as_slice())
        .chain(keys.iter().copied());
    if let Err(crossslot) = router.place(together) {
        return crossslot.into();
    }
    let (mut watched, fresh) = match session.watched.take() {
        Some(w) => (w, false),
        None => match router.reserve(keys[0]).await {
            Ok(w) => (w, true),
            Err(failed) => return failed,
        },
    };
    let answer = router.on_watched(&mut watched, &[args], origin).await;
    let refused = match &answer {
        Answer::Reply(Reply::Error(_)) => true,
        Answer::Raw(raw) => raw.first() == Some(&b'-'),
        Answer::Reply(_) => false,
    };
    if refused && fresh {
        watched.release(false);
    } else {
        session.watched = Some(watched);
    }
    answer
}

/// Commands that concern the connection alone.
fn local(router: &Router, session: &mut Session, name: &str, args: &[&[u8]]) -> Reply {
    let rest = &args[1..];
    let arity = || Reply::Error(format!("ERR wrong number of arguments for '{name}' command"));
    match (name, rest) {
        ("ping", []) => Reply::Simple("PONG".into()),
        ("ping", [msg]) | ("echo", [msg]) => Reply::Bulk(Some(msg.to_vec())),
        // The router's clock: a Redis Cluster client sends TIME to any node.
        ("time", []) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            let bulk = |n: u64| Reply::Bulk(Some(n.to_string().into_bytes()));
            Reply::Array(vec![bulk(now.as_secs()), bulk(now.subsec_micros().into())])
        }
        ("select", [db]) if *db == b"0" => Reply::ok(),
        ("select", [db]) if std::str::from_utf8(db).ok().and_then(|d| d.parse::<i64>().ok()).is_none() => {
            Reply::error("value is not an integer or out of range")
        }
        ("select", [_]) => Reply::error("SELECT is not allowed in cluster mode"),
        ("quit", _) => {
            session.quit = true;
            session.unwatch();
            Reply::ok()
        }
        ("reset", []) => {
            session.resp3 = false;
            session.name = None;
            session.transaction = None;
            session.unwatch();
            Reply::Simple("RESET".into())
        }
        ("hello", _) => hello(session, rest),
        ("client", [sub, more @ ..]) => client(session, &String::from_utf8_lossy(sub).to_lowercase(), more),
        ("auth", _) => Reply::Error(
            "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?".into(),
        ),
        // Clients ask these at connect time and take an empty answer as
        // "nothing known"; the router has no settings of its own to get.
        ("command", []) => Reply::Array(Vec::new()),
        // Maps in RESP3, as Redis 7 answers both.
        ("command", [sub, ..]) | ("config", [sub, ..]) if sub.eq_ignore_ascii_case(b"docs") || sub.eq_ignore_ascii_case(b"get") => {
            Reply::Map(Vec::new())
        }
        ("command", [sub, ..]) | ("config", [sub, ..]) => Reply::error(format!(
            "{} {} is not supported through sluice route (a shard's settings are set on the shard)",
            name.to_uppercase(),
            String::from_utf8_lossy(sub).to_uppercase()
        )),
        ("info", sections) => Reply::Bulk(Some(info(router, sections).into_bytes())),
        // One endpoint a client writes to, as a primary alone.
        ("role", []) => Reply::Array(vec![
            Reply::Bulk(Some(b"master".to_vec())),
            Reply::Integer(0),
            Reply::Array(Vec::new()),
        ]),
        _ => arity(),
    }
}

fn hello(session: &mut Session, rest: &[&[u8]]) -> Reply {
    let mut resp3 = session.resp3;
    let mut options = rest;
    if let Some((version, more)) = rest.split_first() {
        match *version {
            b"2" => resp3 = false,
            b"3" => resp3 = true,
            _ => return Reply::Error("NOPROTO unsupported protocol version".into()),
        }
        options = more;
    }
    while let Some((option, more)) = options.split_first() {
        match (option.to_ascii_lowercase().as_slice(), more) {
            (b"setname", [name, tail @ ..]) => {
                if let Err(refused) = check_name(name) {
                    return refused;
                }
                session.name = Some(name.to_vec());
                options = tail;
            }
            (b"auth", [_, _, ..]) => {
                return Reply::Error("ERR sluice route has no password; send HELLO without AUTH".into());
            }
            _ => {
                return Reply::error(format!(
                    "Syntax error in HELLO option '{}'",
                    String::from_utf8_lossy(option)
                ))
            }
        }
    }
    session.resp3 = resp3;
    let s = |v: &str| Reply::Bulk(Some(v.as_bytes().to_vec()));
    Reply::Map(vec![
        (s("server"), s("redis")),
        (s("version"), s("7.0.0")),
        (s("proto"), Reply::Integer(if resp3 { 3 } else { 2 })),
        (s("id"), Reply::Integer(session.id as i64)),
        (s("mode"), s("standalone")),
        (s("role"), s("master")),
        (s("modules"), Reply::Array(Vec::new())),
    ])
}

fn client(session: &mut Session, sub: &str, args: &[&[u8]]) -> Reply {
    match (sub, args) {
        ("setname", [name]) => match check_name(name) {
            Ok(()) => {
                session.name = Some(name.to_vec());
                Reply::ok()
            }
            Err(refused) => refused,
        },
        ("getname", []) => Reply::Bulk(session.name.clone()),
        ("id", []) => Reply::Integer(session.id as i64),
        ("setinfo", [_, _]) => Reply::ok(),
        ("info", []) => {
            let name = String::from_utf8_lossy(session.name.as_deref().unwrap_or_default()).into_owned();
            let resp = if session.resp3 { 3 } else { 2 };
            Reply::Bulk(Some(
                format!("id={} name={name} db=0 resp={resp}\n", session.id).into_bytes(),
            ))
        }
        _ => Reply::error(format!(
            "unknown subcommand or wrong number of arguments for 'CLIENT|{sub}'"
        )),
    }
}

/// A client name as Redis takes it: printable, no spaces (`CLIENT INFO`
/// and the tenant it names are lines of `key=value` fields).
fn check_name(name: &[u8]) -> Result<(), Reply> {
    if name.iter().all(|&b| (b'!'..=b'~').contains(&b)) {
        return Ok(());
    }
    Err(Reply::error(
        "Client names cannot contain spaces, newlines or special characters.",
    ))
}

/// `INFO [section ...]`: who answers, and what the router has measured;
/// of the sections asked for, those the router has (Redis answers an
/// unknown section with nothing, too).
fn info(router: &Router, asked: &[&[u8]]) -> String {
    let stats = crate::admin::snapshot(router);
    let router_section = format!(
        "# Router\r\nrequests:{}\r\nfailed:{}\r\nshards:{}\r\nconnected_clients:{}\r\n",
        stats.requests,
        stats.failed,
        stats.shards.len(),
        stats.clients,
    );
    let sections = [
        (
            "server",
            "# Server\r\nredis_version:7.0.0\r\nredis_mode:standalone\r\nsluice_route:1\r\n".to_string(),
        ),
        ("router", router_section),
    ];
    let all = asked.is_empty()
        || (asked.iter()).any(|s| {
            [&b"all"[..], b"default", b"everything"]
                .iter()
                .any(|a| s.eq_ignore_ascii_case(a))
        });
    let wanted = |name: &str| all || asked.iter().any(|s| s.eq_ignore_ascii_case(name.as_bytes()));
    sections
        .into_iter()
        .filter(|(name, _)| wanted(name))
        .map(|(_, text)| text)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    use proptest::prelude::*;
    use sluice_resp::{encode_command, parse};

    #[test]
    fn runs_grow_while_their_replies_are_small_and_fall_to_one_when_large() {
        let mut limit = FIRST_RUN;
        let mut seen = vec![limit];
        while limit < MAX_RUN {
            limit = next_run_limit(limit, 100 * limit);
            seen.push(limit);
        }
        assert_eq!(seen, [8, 16, 32, 64, 128]);
        assert_eq!(next_run_limit(MAX_RUN, 100), MAX_RUN);
        assert_eq!(next_run_limit(MAX_RUN, RUN_BYTES + 1), 1);
        assert_eq!(
            next_run_limit(1, RUN_BYTES + 1),
            1,
            "a large reply alone keeps runs at one"
        );
        assert_eq!(next_run_limit(1, 10), 2);
    }

    fn bulk(s: &str) -> Reply {
        Reply::Bulk(Some(s.as_bytes().to_vec()))
    }

    fn double(s: &str) -> Reply {
        Reply::Double(s.as_bytes().to_vec())
    }

    #[test]
    fn popped_members_take_redis_7_s_resp3_shapes_alone_and_in_a_transaction() {
        let flat = || Reply::Array(vec![bulk("c"), bulk("3"), bulk("b"), bulk("2.5")]);
        let paired = Reply::Array(vec![
            Reply::Array(vec![bulk("c"), double("3")]),
            Reply::Array(vec![bulk("b"), double("2.5")]),
        ]);
        assert_eq!(shape(&[b"ZPOPMAX", b"z", b"2"], flat()), paired);
        let one = Reply::Array(vec![bulk("a"), bulk("1")]);
        assert_eq!(
            shape(&[b"zpopmin", b"z"], one),
            Reply::Array(vec![bulk("a"), double("1")])
        );
        let queued = vec![
            vec![b"ZPOPMAX".to_vec(), b"z".to_vec(), b"2".to_vec()],
            vec![b"GET".to_vec(), b"k".to_vec()],
        ];
        let mut raw = Vec::new();
        Reply::Array(vec![flat(), Reply::Bulk(None)]).encode_as(&mut raw, false);
        assert_eq!(exec_resp3(&queued, &raw), Reply::Array(vec![paired, Reply::Bulk(None)]));
        let mut aborted = Vec::new();
        Reply::Array(Vec::new()).encode_as(&mut aborted, false);
        assert_eq!(exec_resp3(&queued, &aborted), Reply::Array(Vec::new()), "left as it is");
    }

    /// A request on the wire: an array of any bytes, or an inline line of
    /// plain words, a quoted one among them.
    fn request() -> impl Strategy<Value = Vec<u8>> {
        let array = prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 1..12).prop_map(|args| {
            let mut wire = Vec::new();
            encode_command(&args, &mut wire);
            wire
        });
        let inline = prop::collection::vec("[a-z0-9:]{1,8}", 1..6).prop_map(|words| {
            let mut line = words.join(" ");
            line.push_str(" \"two\\x41 words\"\r\n");
            line.into_bytes()
        });
        prop_oneof![array, inline]
    }

    proptest! {
        /// However a pipeline is cut into reads, the router frames the same
        /// requests, with the same arguments, as the owned parser does on
        /// the whole of it.
        #[test]
        fn borrowed_arguments_are_the_owned_parser_s(
            requests in prop::collection::vec(request(), 1..8),
            cuts in prop::collection::vec(1usize..64, 0..16),
        ) {
            let wire = requests.concat();
            let limits = Limits::default();
            let mut expected = Vec::new();
            let mut at = 0;
            while let Some((args, n)) = parse(&wire[at..], &limits).unwrap() {
                expected.push(args);
                at += n;
            }
            let mut requests = Requests::new(limits);
            let mut framed: Vec<Vec<Vec<u8>>> = Vec::new();
            let mut input: Vec<u8> = Vec::new();
            let mut fed = 0;
            let mut cuts = cuts.into_iter();
            while fed < wire.len() {
                let take = cuts.next().unwrap_or(wire.len()).min(wire.len() - fed);
                input.extend_from_slice(&wire[fed..fed + take]);
                fed += take;
                let mut used = 0;
                while let Some((request, n)) = requests.next(&input[used..]).unwrap() {
                    framed.push(match request {
                        Request::Array(args) => args.iter().map(|a| a.to_vec()).collect(),
                        Request::Inline(args) => args,
                    });
                    used += n;
                }
                input.drain(..used);
            }
            prop_assert_eq!(framed, expected);
            prop_assert!(input.is_empty());
        }
    }
}
