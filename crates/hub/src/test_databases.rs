//! The hub's unit tests that run on both engines: once on SQLite in a temporary folder, then,
//! when `KALYPSO_TEST_POSTGRES_URL` is set, on a PostgreSQL database made for the run and
//! dropped after it.

use std::future::Future;

use sqlx::Connection;

/// Runs `check` with the URL of a fresh SQLite database (`<label>.db`), then, given
/// `KALYPSO_TEST_POSTGRES_URL`, with that of a fresh PostgreSQL database
/// `kalypso_hub_<label>_<pid>` on the same server (the URL's query kept), dropped afterwards.
/// `check` must close its connections before it returns.
pub(crate) async fn on_each_engine<F, Fut>(label: &str, check: F)
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = ()>,
{
    let tmp = tempfile::tempdir().unwrap();
    check(format!(
        "sqlite://{}",
        tmp.path().join(format!("{label}.db")).display()
    ))
    .await;
    let Ok(base) = std::env::var("KALYPSO_TEST_POSTGRES_URL") else {
        return;
    };
    let base = base.trim();
    if base.is_empty() {
        return;
    }
    sqlx::any::install_default_drivers();
    let name = format!("kalypso_hub_{label}_{}", std::process::id());
    let mut admin = sqlx::AnyConnection::connect(base).await.unwrap();
    let mut admin_do = async |statement: String| sqlx::query(&statement).execute(&mut admin).await.map(drop);
    admin_do(format!("DROP DATABASE IF EXISTS {name}")).await.unwrap();
    admin_do(format!("CREATE DATABASE {name}")).await.unwrap();
    check(crate::db::with_database(base, &name).expect("KALYPSO_TEST_POSTGRES_URL is a URL")).await;
    admin_do(format!("DROP DATABASE {name}")).await.unwrap();
}
