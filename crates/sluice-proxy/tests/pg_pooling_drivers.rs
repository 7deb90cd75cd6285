//! Transaction pooling as a real driver uses it (tokio-postgres, whose
//! prepared statements are named protocol-level statements, as JDBC's,
//! asyncpg's and pgx's are): more statements than a backend keeps, reused
//! in random order; SQL that drops statements from one client while
//! another keeps using the same statements on the same backends; the
//! unnamed statement parsed in one request and bound in the next (libpq's
//! `PQprepare` with an empty name, pgx's describe-exec mode), also around
//! errors; and LISTEN, refused with an error that names session pooling.

mod support;

use bytes::BytesMut;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use sluice_proxy::pg::frame;
use sluice_proxy::{PoolMode, Protocol, ProxyConfig};
use support::pgwire::{close_statement, execute, prepare, PgConn, QueryError};
use support::proxy::{gate, ProxyHandle};
use support::servers::PgServer;
use tokio_postgres::{Client, NoTls, Statement};

/// A proxy with transaction pooling and P pinned at 2 (the gate lets two
/// requests in at once, so two clients share the backends).
fn pooled(server: &PgServer) -> ProxyHandle {
    let mut config = ProxyConfig::new("127.0.0.1:0", server.addr(), Protocol::Pg);
    config.pool = PoolMode::Transaction;
    config.threads = 1;
    ProxyHandle::start_with(config, gate(2, 10_000, 30_000))
}

async fn connect(proxy: &ProxyHandle) -> Client {
    let params = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres",
        proxy.addr.port()
    );
    let (client, connection) = tokio_postgres::connect(&params, NoTls)
        .await
        .expect("connecting through the proxy");
    tokio::spawn(connection);
    client
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime for the driver")
}

/// `SELECT $1::int + k`: statement k answers k + its argument.
async fn prepare_many(client: &Client, n: usize) -> Vec<Statement> {
    let mut statements = Vec::with_capacity(n);
    for k in 0..n {
        let sql = format!("SELECT $1::int + {k}");
        statements.push(client.prepare(&sql).await.expect("preparing"));
    }
    statements
}

async fn check(client: &Client, statement: &Statement, k: usize, arg: i32) {
    let row = client
        .query_one(statement, &[&arg])
        .await
        .unwrap_or_else(|e| panic!("statement {k}: {e}"));
    assert_eq!(row.get::<_, i32>(0), arg + k as i32, "statement {k}");
}

/// Two clients hold 1,000 statements each (five times what a backend
/// keeps), the same texts, and use them in random order on two backends:
/// every statement a backend closed to keep its limit is made again where
/// it is bound.
#[test]
fn a_thousand_prepared_statements_reused_in_random_order() {
    let Some(server) = PgServer::start() else { return };
    let proxy = pooled(&server);
    runtime().block_on(async {
        let (a, b) = (connect(&proxy).await, connect(&proxy).await);
        let (sa, sb) = tokio::join!(prepare_many(&a, 1000), prepare_many(&b, 1000));
        tokio::join!(use_in_random_order(&a, &sa, 1), use_in_random_order(&b, &sb, 2));
    });
}

/// Runs every statement twice, in an order drawn from `seed`.
async fn use_in_random_order(client: &Client, statements: &[Statement], seed: u64) {
    let mut rng = rand_pcg::Pcg64::seed_from_u64(seed);
    let mut order: Vec<usize> = (0..statements.len()).collect();
    for _ in 0..2 {
        order.shuffle(&mut rng);
        for &k in &order {
            check(client, &statements[k], k, rng.gen_range(0..1000)).await;
        }
    }
}

/// One client drops statements with SQL (DEALLOCATE name, DEALLOCATE ALL,
/// DISCARD ALL) while the other keeps using statements of the same texts,
/// which the backends share: the dropping client loses only its own, the
/// other never sees an error.
#[test]
fn sql_that_drops_statements_acts_on_the_issuing_clients_own() {
    let Some(server) = PgServer::start() else { return };
    let proxy = pooled(&server);
    let texts: Vec<String> = (0..20).map(|k| format!("SELECT {k}")).collect();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let steady = scope.spawn(|| {
            runtime().block_on(async {
                let b = connect(&proxy).await;
                let mut mine = Vec::new();
                for text in &texts {
                    mine.push(b.prepare(text).await.expect("preparing"));
                }
                let mut rounds = 0;
                while !done.load(std::sync::atomic::Ordering::Relaxed) || rounds < 100 {
                    let k = rounds % mine.len();
                    let row = b
                        .query_one(&mine[k], &[])
                        .await
                        .unwrap_or_else(|e| panic!("round {rounds}: {e}"));
                    assert_eq!(row.get::<_, i32>(0), k as i32);
                    rounds += 1;
                }
                rounds
            })
        });
        // Stops the other client however this one ends, so that a failure
        // here fails the test instead of leaving it waiting.
        struct Done<'a>(&'a std::sync::atomic::AtomicBool);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let stop = Done(&done);
        let mut a = PgConn::connect(proxy.addr, "postgres");
        for command in ["DEALLOCATE", "deallocate prepare", "DEALLOCATE ALL", "DISCARD ALL"] {
            for round in 0..5 {
                for (k, text) in texts.iter().enumerate() {
                    a.send(&prepare(&format!("a{k}"), text));
                    assert_eq!(
                        a.finish(),
                        (Ok(vec![]), b'I'),
                        "{command} round {round}: preparing a{k}"
                    );
                    a.send(&execute(&format!("a{k}")));
                    assert_eq!(a.finish(), (Ok(vec![k.to_string()]), b'I'));
                }
                let (gone, kept) = match command {
                    "DEALLOCATE ALL" | "DISCARD ALL" => {
                        assert_eq!(a.query(command), Ok(vec![]), "{command}");
                        ("a0", None)
                    }
                    _ => {
                        assert_eq!(a.query(&format!("{command} \"a3\"")), Ok(vec![]), "{command}");
                        ("a3", Some("a4"))
                    }
                };
                a.send(&execute(gone));
                let error = a.finish().0;
                assert!(
                    matches!(&error, Err(QueryError::Server { sqlstate, .. }) if sqlstate == "26000"),
                    "{command}: {gone} is gone: {error:?}"
                );
                if let Some(kept) = kept {
                    a.send(&execute(kept));
                    assert_eq!(
                        a.finish(),
                        (Ok(vec!["4".to_string()]), b'I'),
                        "{command}: {kept} is kept"
                    );
                }
                let closes: Vec<String> = (0..20).map(|k| format!("a{k}")).collect();
                for name in closes {
                    a.send(&close_statement(&name));
                    assert_eq!(a.finish().1, b'I');
                }
            }
        }
        drop(stop);
        let rounds = steady.join().expect("the other client never saw an error");
        assert!(rounds >= 100, "the other client ran {rounds} rounds");
    });
}

/// LISTEN cannot follow a client from backend to backend: it fails as a
/// statement the server refused (so a transaction around it is aborted, as
/// with any error), naming session pooling, and the client goes on.
#[test]
fn listen_is_refused_with_an_error_naming_session_pooling() {
    let Some(server) = PgServer::start() else { return };
    let proxy = pooled(&server);
    runtime().block_on(async {
        let client = connect(&proxy).await;
        let err = client
            .batch_execute("LISTEN news")
            .await
            .expect_err("LISTEN is refused");
        let db = err.as_db_error().expect("an error from the server");
        assert_eq!(db.code(), &tokio_postgres::error::SqlState::FEATURE_NOT_SUPPORTED);
        assert!(db.message().contains("pool = \"session\""), "{}", db.message());
        for hidden in ["/* why */ LISTEN news", "SELECT 1; listen news"] {
            let err = client.batch_execute(hidden).await.expect_err(hidden);
            assert_eq!(
                err.code(),
                Some(&tokio_postgres::error::SqlState::FEATURE_NOT_SUPPORTED),
                "{hidden}"
            );
        }
        let listening = client
            .query_one("SELECT count(*) FROM pg_listening_channels()", &[])
            .await
            .expect("asking the backend");
        assert_eq!(listening.get::<_, i64>(0), 0, "no backend listens");
        let err = client
            .query("listen news", &[])
            .await
            .expect_err("also by the extended protocol");
        assert_eq!(
            err.code(),
            Some(&tokio_postgres::error::SqlState::FEATURE_NOT_SUPPORTED)
        );
        let row = client.query_one("SELECT 1 + 1", &[]).await.expect("served after");
        assert_eq!(row.get::<_, i32>(0), 2);
    });
}

/// Three clients Parse the unnamed statement, each in a request of its own,
/// on the one backend P = 1 leaves them, then Bind it in the next: each
/// runs its own statement, never the one the backend ran last; a client
/// that has none is refused as by a server of its own.
#[test]
fn the_unnamed_statement_follows_its_client_across_requests() {
    let Some(server) = PgServer::start() else { return };
    let mut config = ProxyConfig::new("127.0.0.1:0", server.addr(), Protocol::Pg);
    config.pool = PoolMode::Transaction;
    config.threads = 1;
    let proxy = ProxyHandle::start_with(config, gate(1, 10_000, 30_000));
    let mut clients: Vec<PgConn> = (0..3).map(|_| PgConn::connect(proxy.addr, "postgres")).collect();
    for (k, client) in clients.iter_mut().enumerate() {
        client.send(&prepare("", &format!("SELECT 'client {k}'")));
        assert_eq!(client.finish().0, Ok(vec![]), "client {k}'s Parse");
    }
    for round in 0..2 {
        for (k, client) in clients.iter_mut().enumerate().rev() {
            client.send(&execute(""));
            assert_eq!(client.finish().0, Ok(vec![format!("client {k}")]), "round {round}");
        }
    }
    let mut none = PgConn::connect(proxy.addr, "postgres");
    none.send(&execute(""));
    match none.finish().0 {
        Err(QueryError::Server { sqlstate, .. }) => {
            assert_eq!(sqlstate, "26000", "unnamed prepared statement does not exist")
        }
        other => panic!("a client without an unnamed statement ran one: {other:?}"),
    }
    // A simple Query drops a client's unnamed statement, as on its own server.
    clients[0].query("SELECT 1").expect("a simple query");
    clients[0].send(&execute(""));
    assert!(matches!(clients[0].finish().0, Err(QueryError::Server { .. })));
    clients[1].send(&execute(""));
    assert_eq!(clients[1].finish().0, Ok(vec!["client 1".to_string()]));
}

/// The unnamed statement around errors, as PostgreSQL keeps it: a Parse
/// that fails drops the one before (a Bind then fails with 26000); a Parse
/// or Close skipped after an earlier error in its batch leaves the one
/// before in place, also after a statement described, bound and run in the
/// same batch, and with two batches in one write. The same steps run on
/// PostgreSQL directly and through the proxy, on the one backend P = 1
/// leaves, and answer alike.
#[test]
fn the_unnamed_statement_around_errors_is_as_postgresql_keeps_it() {
    let Some(server) = PgServer::start() else { return };
    let mut config = ProxyConfig::new("127.0.0.1:0", server.addr(), Protocol::Pg);
    config.pool = PoolMode::Transaction;
    config.threads = 1;
    let proxy = ProxyHandle::start_with(config, gate(1, 10_000, 30_000));
    let direct: std::net::SocketAddr = server.addr().parse().expect("the server's address");
    let steps = |conn: &mut PgConn| -> Vec<Result<Vec<String>, QueryError>> {
        // An error, then the batch's rest: a Bind of a statement nobody has.
        let after_error = |rest: &[(u8, &str)]| {
            let mut out = BytesMut::new();
            frame::write_message(&mut out, b'B', b"\0nope\0\0\0\0\0\0\0");
            for (tag, body) in rest {
                frame::write_message(&mut out, *tag, body.as_bytes());
            }
            frame::write_message(&mut out, b'S', b"");
            out
        };
        // A statement described, bound and run, then a Parse that fails:
        // the error's position counts every answer before it.
        let mut described_then_failed = BytesMut::new();
        frame::write_message(&mut described_then_failed, b'P', b"\0SELECT 'c'\0\0\0");
        frame::write_message(&mut described_then_failed, b'D', b"S\0");
        frame::write_message(&mut described_then_failed, b'B', b"\0\0\0\0\0\0\0\0");
        frame::write_message(&mut described_then_failed, b'E', b"\0\0\0\0\0");
        frame::write_message(&mut described_then_failed, b'P', b"\0SELEC 'd'\0\0\0");
        frame::write_message(&mut described_then_failed, b'S', b"");
        // Two batches in one write: one whose Parse is skipped, then one
        // whose Bind runs the statement the first left.
        let pipelined = [after_error(&[(b'P', "\0SELECT 'b'\0\0\0")]), execute("")].concat();
        let batches = [
            (prepare("", "SELECT 'a'"), 1),
            (prepare("", "SELEC 'b'"), 1),
            (execute(""), 1),
            (prepare("", "SELECT 'a'"), 1),
            (after_error(&[(b'P', "\0SELECT 'b'\0\0\0")]), 1),
            (execute(""), 1),
            (after_error(&[(b'C', "S\0")]), 1),
            (execute(""), 1),
            (described_then_failed, 1),
            (execute(""), 1),
            (prepare("", "SELECT 'a'"), 1),
            (BytesMut::from(&pipelined[..]), 2),
        ];
        batches
            .iter()
            .flat_map(|(batch, answers)| {
                conn.send(batch);
                (0..*answers).map(|_| conn.finish().0).collect::<Vec<_>>()
            })
            .collect()
    };
    let expected = steps(&mut PgConn::connect(direct, "postgres"));
    assert!(
        matches!(&expected[2], Err(QueryError::Server { sqlstate, .. }) if sqlstate == "26000"),
        "{expected:?}"
    );
    assert_eq!(expected[5], Ok(vec!["a".to_string()]));
    assert!(
        matches!(&expected[9], Err(QueryError::Server { sqlstate, .. }) if sqlstate == "26000"),
        "{expected:?}"
    );
    assert_eq!(expected[12], Ok(vec!["a".to_string()]));
    assert_eq!(steps(&mut PgConn::connect(proxy.addr, "postgres")), expected);
}
