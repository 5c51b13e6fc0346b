//! Parses arbitrary text as a template: parsing must never panic or overflow the stack, and
//! a template that parses must print its errors and drop cleanly.

#![no_main]

use std::sync::{Arc, OnceLock};

use kalypso_gotmpl::{Func, FuncMap, Template, Type, Value};
use libfuzzer_sys::fuzz_target;

fn funcs() -> Arc<FuncMap> {
    static FUNCS: OnceLock<Arc<FuncMap>> = OnceLock::new();
    FUNCS
        .get_or_init(|| {
            let mut m = FuncMap::new();
            m.insert("upper", Func::new([Type::String], |a| Ok(a[0].clone())));
            m.insert(
                "list",
                Func::variadic([], Type::Interface, |a| {
                    Ok(Value::List(kalypso_gotmpl::List::interfaces(a.to_vec())))
                }),
            );
            Arc::new(m)
        })
        .clone()
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Template::parse("template", text, funcs()) {
        Ok(t) => {
            let _ = t.template_names();
        }
        Err(e) => {
            assert!(e.to_string().starts_with("template: "));
        }
    }
});
