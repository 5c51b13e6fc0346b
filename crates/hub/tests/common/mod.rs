//! What the hub's integration tests share: the databases a case runs on.

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};

use sqlx::Connection;

static DATABASES: AtomicU32 = AtomicU32::new(0);

/// A fresh PostgreSQL database on the server `base` names; its URL (the query of `base`
/// kept).
async fn fresh_postgres(base: &str) -> String {
    sqlx::any::install_default_drivers();
    let name = format!(
        "kalypso_hub_test_{}_{}_{}",
        std::process::id(),
        DATABASES.fetch_add(1, Ordering::SeqCst),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    );
    let mut conn = sqlx::AnyConnection::connect(base)
        .await
        .expect("KALYPSO_TEST_POSTGRES_URL reachable");
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    kalypso_hub::db::with_database(base, &name).expect("KALYPSO_TEST_POSTGRES_URL is a URL")
}

/// The databases a case runs on: SQLite (`<label>.db` in `dir`), and a fresh PostgreSQL
/// database when `KALYPSO_TEST_POSTGRES_URL` is set (required when services are).
pub async fn databases(dir: &Path, label: &str) -> Vec<String> {
    let mut out = vec![format!("sqlite://{}", dir.join(format!("{label}.db")).display())];
    let what = format!("the hub's {label} cases on PostgreSQL");
    if let Some(base) = kalypso_testkit::postgres_url(&what) {
        out.push(fresh_postgres(&base).await);
    }
    out
}
