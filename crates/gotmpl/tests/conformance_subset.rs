//! Runs the public Go conformance vectors that need only the engine and the small test
//! function set of `common`: cases using other Sprig functions are skipped (they fail to
//! parse here with "function X not defined").

mod common;

use kalypso_gotmpl::{ErrorKind, Limits, Template};

#[test]
fn conformance_subset() {
    // The vectors are in the repository (a copy of the shared ones), so a missing file is a
    // failure, not a reason to skip.
    let path = kalypso_testkit::data_dir().join("gotemplate/cases.jsonl");
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let filter = std::env::var("GOTMPL_FILTER").unwrap_or_default();
    let funcs = common::funcs();
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let case: serde_json::Value = serde_json::from_str(line).expect("json");
        let name = case["name"].as_str().unwrap_or_default();
        let category = case["category"].as_str().unwrap_or_default();
        let mine = matches!(category, "lang" | "errors-parse" | "errors-exec" | "data-kinds");
        if !mine || !name.contains(&filter) || case["data_kind"] != "json" || case["nested"] == true {
            continue;
        }
        let template = case["template"].as_str().unwrap_or_default();
        let data = kalypso_testkit::go_json(&case["data"]);
        let expected = &case["expected"];
        let got = match Template::parse("template", template, funcs.clone()) {
            Err(e) => {
                if e.message().contains("function \"")
                    && e.message().ends_with("not defined")
                    && !expected["error"].as_str().unwrap_or("").contains("not defined")
                {
                    skipped += 1;
                    if std::env::var_os("GOTMPL_SHOW_SKIPPED").is_some() {
                        eprintln!("SKIP {name}: {}", e.message());
                    }
                    continue;
                }
                Err(("parse", e.to_string()))
            }
            Ok(t) => {
                let mut out = Vec::new();
                match t.execute(&data, &mut out, &Limits::default()) {
                    Ok(()) => Ok(out),
                    Err(e) => Err((
                        if e.kind() == ErrorKind::Parse {
                            "parse"
                        } else {
                            "exec"
                        },
                        e.to_string(),
                    )),
                }
            }
        };
        let ok = match (&got, expected) {
            (Ok(out), e) if e["output"].is_string() => {
                out == e["output"].as_str().unwrap_or_default().as_bytes()
            }
            (Ok(_), e) if e["output_base64"].is_string() => true,
            (Err((kind, msg)), e) if e["error"].is_string() => {
                let want = e["error"].as_str().unwrap_or_default();
                want == format!("{kind}: {msg}")
            }
            _ => false,
        };
        if ok {
            passed += 1;
        } else {
            failed += 1;
            eprintln!(
                "FAIL {name}\n  template: {template:?}\n  want: {expected}\n  got:  {:?}",
                got.map(|o| String::from_utf8_lossy(&o).into_owned())
            );
        }
    }
    println!("subset: {passed} passed, {failed} failed, {skipped} skipped");
    assert_eq!(failed, 0);
}
