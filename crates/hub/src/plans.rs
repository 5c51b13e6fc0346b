//! The query plans of the statements that must not grow with the fleet: on a database of
//! 20,000 clusters (statistics gathered), each statement the gate, the environment status, the
//! fleet map, the promotions page, the cluster-type page, the ingest batch, the GitOps refresh
//! (a rewind's too) and the staleness sweep run on `clusters` is explained, and the test fails when a plan
//! reads the whole table (or a whole index) of the clusters or of their latest states instead
//! of a range of an index — on SQLite, and on
//! PostgreSQL when `KALYPSO_TEST_POSTGRES_URL` is set (with sequential scans priced out, so
//! that a plan that still has one has no index to use).

use sqlx::{Any, Row};

use crate::counts;
use crate::db::{Backend, Db, DbOptions};

/// A statement and its parameters.
struct Case {
    what: &'static str,
    sql: String,
    binds: Vec<Bind>,
    /// An index the plan must use.
    index: Option<&'static str>,
    /// The plan must give the rows in order (no sort of the range).
    ordered: bool,
}

#[derive(Clone)]
enum Bind {
    Text(&'static str),
    Int(i64),
}

fn bind<'q>(
    mut q: sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>>,
    binds: &'q [Bind],
) -> sqlx::query::Query<'q, Any, sqlx::any::AnyArguments<'q>> {
    for b in binds {
        q = match b {
            Bind::Text(t) => q.bind(*t),
            Bind::Int(i) => q.bind(*i),
        };
    }
    q
}

fn cases(backend: Backend) -> Vec<Case> {
    use Bind::{Int, Text};
    let stream =
        |what, stale: bool, state: &'static str, position: i64, cluster_type: Option<&'static str>, index| {
            let mut binds = vec![Text("dev"), Int(1_000), Int(100), Int(0), Int(i64::from(stale))];
            if !state.is_empty() {
                binds.push(Text(state));
            }
            if position >= 0 {
                binds.push(Int(position));
            }
            if let Some(t) = cluster_type {
                binds.push(Text(t));
            }
            Case {
                what,
                sql: counts::stream_sql(stale, state, position, cluster_type),
                binds,
                index: Some(index),
                ordered: true,
            }
        };
    let mut cases = vec![
        stream(
            "a group of an environment (the gate's clusters, the blockers)",
            false,
            "compliant",
            1,
            None,
            "clusters_environment_group",
        ),
        stream(
            "clusters without a platform state",
            false,
            "",
            -1,
            None,
            "clusters_environment_group",
        ),
        stream(
            "a group of one cluster type (the cluster-type page, a gate over some cluster types)",
            true,
            "reconciling",
            2,
            Some("t-1"),
            "clusters_group",
        ),
        Case {
            what: "the unswept clusters of every environment",
            sql: counts::unswept_sql(""),
            binds: vec![Int(1_000)],
            index: Some("clusters_seen"),
            ordered: false,
        },
        Case {
            what: "the unswept clusters of a cluster type",
            sql: counts::unswept_sql(counts::UNSWEPT_OF_TYPE),
            binds: vec![Int(1_000), Text("dev"), Text("t-1")],
            index: Some("clusters_seen"),
            ordered: false,
        },
        Case {
            what: "the ingest batch's stored clusters",
            sql: crate::ingest::stored_latest(backend),
            binds: vec![Text(r#"[[0,"dev","c-1"],[1,"dev","c-2"],[2,"dev","new"]]"#)],
            index: None,
            ordered: false,
        },
        Case {
            what: "the ingest batch's clusters upsert",
            sql: crate::ingest::clusters_upsert(backend),
            binds: vec![Text(
                r#"[["dev","c-1","t-1",5,"compliant","dev@sha1:c","cccccccccccccccccccccccccccccccccccccccc",2,"",5],["dev","new","t-1",5,null,null,null,null,null,null]]"#,
            )],
            index: None,
            ordered: false,
        },
        Case {
            what: "the ingest batch's latest states",
            sql: crate::ingest::latest_upsert(backend),
            binds: vec![Text(
                r#"[[1,"dev","c-1","Kustomization/flux-system/platform",1,"compliant","","cccccccccccccccccccccccccccccccccccccccc","","",5,5],[null,"dev","c-2","Kustomization/flux-system/platform",1,"compliant","","cccccccccccccccccccccccccccccccccccccccc","","",5,5]]"#,
            )],
            index: None,
            ordered: false,
        },
        Case {
            what: "the ingest batch's history",
            sql: crate::ingest::history_insert(backend),
            binds: vec![Text(
                r#"[[1,"dev","c-1","Kustomization/flux-system/platform",1,"compliant","","cccccccccccccccccccccccccccccccccccccccc","","",5,5],[null,"dev","c-2","Kustomization/flux-system/platform",1,"compliant","","cccccccccccccccccccccccccccccccccccccccc","","",5,5]]"#,
            )],
            index: None,
            ordered: false,
        },
        Case {
            what: "the refresh's reports of new commits",
            sql: crate::gitops::PENDING_BY_COMMIT.to_owned(),
            binds: vec![Text("dev"), Int(2)],
            index: None,
            ordered: false,
        },
        Case {
            what: "the refresh's clusters without a platform state",
            sql: crate::gitops::PENDING_UNAPPLIED.to_owned(),
            binds: vec![Text("dev")],
            index: Some("clusters_unapplied"),
            ordered: false,
        },
        Case {
            what: "the refresh's clusters of a group on a commit a rewind abandoned",
            sql: crate::gitops::off_branch_sql(false),
            binds: vec![
                Int(5),
                Text("dev"),
                Text("t-1"),
                Int(0),
                Int(2),
                Text("compliant"),
            ],
            index: Some("clusters_group"),
            ordered: false,
        },
        Case {
            what: "the sweep, to stale",
            sql: counts::SWEEP_STALE.to_owned(),
            binds: vec![Int(1_000), Int(1_000), Int(100)],
            index: Some("clusters_seen"),
            ordered: false,
        },
        Case {
            what: "the sweep, back to fresh",
            sql: counts::SWEEP_FRESH.to_owned(),
            binds: vec![Int(1_000), Int(1_000), Int(100)],
            index: Some("clusters_seen"),
            ordered: false,
        },
    ];
    // On SQLite the batch's writes are the three statements above, run as one query.
    if backend == Backend::Postgres {
        cases.push(
            Case {
                what: "the ingest batch's writes as one statement (PostgreSQL)",
                sql: crate::ingest::postgres_writes(),
                binds: vec![
                    Text(
                        r#"[["dev","c-1","t-1",5,"compliant","dev@sha1:c","cccccccccccccccccccccccccccccccccccccccc",2,"",5],["dev","new","t-1",5,null,null,null,null,null,null]]"#,
                    ),
                    Text(
                        r#"[[1,"dev","c-1","Kustomization/flux-system/platform",1,"compliant","","cccccccccccccccccccccccccccccccccccccccc","","",5,5],[null,"dev","new","Kustomization/flux-system/platform",1,"compliant","","cccccccccccccccccccccccccccccccccccccccc","","",5,5]]"#,
                    ),
                    Text(
                        r#"[[1,"dev","c-1","Kustomization/flux-system/platform",1,"compliant","","cccccccccccccccccccccccccccccccccccccccc","","",5,5],[null,"dev","new","Kustomization/flux-system/platform",1,"compliant","","cccccccccccccccccccccccccccccccccccccccc","","",5,5]]"#,
                    ),
                ],
                index: None,
                ordered: false,
            }
        );
    }
    cases
}

/// 20,000 clusters of `dev` in 50 cluster types, spread over groups, and their latest states.
async fn populate(db: &Db) {
    let series = match db.backend() {
        Backend::Sqlite => {
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000) SELECT i FROM n"
        }
        Backend::Postgres => "SELECT i FROM generate_series(1, 20000) AS s(i)",
    };
    let pool = db.pool();
    for (position, sha) in [(0, "a"), (1, "b"), (2, "c")] {
        sqlx::query(
            "INSERT INTO gitops_commits (environment, sha, parent, position, committed_at, promoted_commit) \
             VALUES ('dev', $1, NULL, $2, 0, NULL)",
        )
        .bind(sha.repeat(40))
        .bind(position)
        .execute(pool)
        .await
        .unwrap();
    }
    sqlx::query(&format!(
        "INSERT INTO clusters (environment, name, cluster_type, first_seen, last_seen, state, commit_sha, position, reported_at, stale) \
         SELECT 'dev', 'c-' || i, 't-' || (i % 50), 0, i, \
         CASE i % 4 WHEN 0 THEN 'compliant' WHEN 1 THEN 'failed' WHEN 2 THEN 'reconciling' ELSE NULL END, \
         CASE WHEN i % 4 = 3 THEN NULL ELSE 'cccccccccccccccccccccccccccccccccccccccc' END, \
         CASE WHEN i % 4 = 3 THEN NULL ELSE i % 3 END, CASE WHEN i % 4 = 3 THEN NULL ELSE i END, \
         CASE WHEN i % 10 = 0 THEN 1 ELSE 0 END FROM ({series}) AS numbers"
    ))
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(&format!(
        "INSERT INTO latest (cluster_id, object, drives, state, revision, commit_sha, message, reason, event_time, received_at) \
         SELECT c.id, 'Kustomization/flux-system/platform', 1, 'compliant', '', 'cccccccccccccccccccccccccccccccccccccccc', '', '', 0, 0 \
         FROM clusters c WHERE c.id IN ({series})"
    ))
    .execute(pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE").execute(pool).await.unwrap();
}

/// The plan of `case`, one line per step.
async fn plan(conn: &mut sqlx::AnyConnection, backend: Backend, case: &Case) -> Vec<String> {
    let sql = match backend {
        Backend::Sqlite => format!("EXPLAIN QUERY PLAN {}", case.sql),
        Backend::Postgres => format!("EXPLAIN {}", case.sql),
    };
    let rows = bind(sqlx::query(&sql), &case.binds)
        .fetch_all(&mut *conn)
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", case.what));
    rows.iter()
        .map(|r| match backend {
            // id, parent, notused, detail
            Backend::Sqlite => r.try_get::<String, _>(3).unwrap(),
            Backend::Postgres => r.try_get::<String, _>(0).unwrap(),
        })
        .collect()
}

async fn check_plans(url: &str) {
    let db = Db::connect(url, &DbOptions::default()).await.unwrap();
    populate(&db).await;
    let mut conn = db.pool().acquire().await.unwrap();
    if db.backend() == Backend::Postgres {
        sqlx::query("SET enable_seqscan = off")
            .execute(&mut *conn)
            .await
            .unwrap();
    }
    for case in cases(db.backend()) {
        let lines = plan(&mut conn, db.backend(), &case).await;
        let text = lines.join("\n");
        let scans = lines.iter().any(|l| match db.backend() {
            // `SCAN clusters` reads the table, `SCAN clusters USING ... INDEX` a whole index;
            // `SEARCH clusters USING INDEX` a range. The latest states (one a cluster's object)
            // are read by key too.
            Backend::Sqlite => ["SCAN clusters", "SCAN c", "SCAN latest", "SCAN l"]
                .iter()
                .any(|scan| l == scan || l.starts_with(&format!("{scan} "))),
            Backend::Postgres => l.contains("Seq Scan on clusters") || l.contains("Seq Scan on latest"),
        });
        assert!(
            !scans,
            "{}: the plan scans the clusters or the latest states:\n{text}",
            case.what
        );
        if let Some(index) = case.index {
            assert!(
                text.contains(index),
                "{}: the plan does not use {index}:\n{text}",
                case.what
            );
        }
        if case.ordered {
            let sorts = match db.backend() {
                Backend::Sqlite => text.contains("TEMP B-TREE"),
                Backend::Postgres => text.contains("Sort"),
            };
            assert!(!sorts, "{}: the plan sorts the group:\n{text}", case.what);
        }
    }
    conn.close().await.unwrap();
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_statement_on_clusters_scans_the_table() {
    crate::test_databases::on_each_engine("plans", |url| async move { check_plans(&url).await }).await;
}
