//! Kubernetes label selectors, validated and matched as `apimachinery` does, with an
//! explanation of every requirement for `kalypso explain`.
//!
//! A selector with neither `matchLabels` nor `matchExpressions` selects everything. Invalid
//! selectors (bad keys or values, unknown operators, `In` without values) are errors of the
//! policy that holds them, as the original's `LabelSelectorAsSelector` rejects them; every
//! problem is reported with the part of the selector it is in.

use std::fmt;

use kalypso_api::{LabelSelector, Labels};

use crate::names::{label_key_error, label_value_error};

/// A requirement's operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operator {
    /// `matchLabels`: the label has exactly this value.
    Equals,
    /// The label exists and has one of the values.
    In,
    /// The label is absent or has none of the values.
    NotIn,
    /// The label exists.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

/// One requirement of a selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    /// The label key.
    pub key: String,
    /// The operator.
    pub operator: Operator,
    /// The values, sorted and deduplicated.
    pub values: Vec<String>,
}

impl Requirement {
    /// Whether `labels` satisfy the requirement.
    pub fn matches(&self, labels: &Labels) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            Operator::Equals | Operator::In => value.is_some_and(|v| self.values.binary_search(v).is_ok()),
            Operator::NotIn => value.is_none_or(|v| self.values.binary_search(v).is_err()),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
        }
    }
}

impl fmt::Display for Requirement {
    /// The requirement in `kubectl` selector syntax: `size=large`, `tier in (t0,t1)`, `!x`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.operator {
            Operator::Equals => write!(f, "{}={}", self.key, self.values.join(",")),
            Operator::In => write!(f, "{} in ({})", self.key, self.values.join(",")),
            Operator::NotIn => write!(f, "{} notin ({})", self.key, self.values.join(",")),
            Operator::Exists => write!(f, "{}", self.key),
            Operator::DoesNotExist => write!(f, "!{}", self.key),
        }
    }
}

/// A parsed, valid label selector.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

/// How one requirement fared against a set of labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequirementCheck {
    /// The requirement.
    pub requirement: Requirement,
    /// The label's value, if present.
    pub actual: Option<String>,
    /// Whether the requirement holds.
    pub satisfied: bool,
}

/// One problem of a selector: the part of it that is wrong and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SelectorError {
    /// The offending part, relative to the selector (`matchExpressions[1].operator`,
    /// `matchLabels.zone`).
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for SelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl Selector {
    /// Validates a selector as Kubernetes does. Returns every problem found, each naming
    /// the offending part.
    pub fn parse(selector: &LabelSelector) -> Result<Selector, Vec<SelectorError>> {
        let mut errors = Vec::new();
        let mut requirements = Vec::new();
        let mut error = |field: String, message: String| errors.push(SelectorError { field, message });
        for (key, value) in &selector.match_labels {
            let field = format!("matchLabels.{key}");
            if let Some(e) = label_key_error(key) {
                error(field.clone(), e);
            }
            if let Some(e) = label_value_error(value) {
                error(field, e);
            }
            requirements.push(Requirement {
                key: key.clone(),
                operator: Operator::Equals,
                values: vec![value.clone()],
            });
        }
        for (i, expr) in selector.match_expressions.iter().enumerate() {
            let field = |part: &str| format!("matchExpressions[{i}].{part}");
            if let Some(e) = label_key_error(&expr.key) {
                error(field("key"), e);
            }
            let operator = match expr.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => {
                    error(
                        field("operator"),
                        format!("unknown operator {other:?}; use In, NotIn, Exists or DoesNotExist"),
                    );
                    continue;
                }
            };
            match operator {
                Operator::In | Operator::NotIn if expr.values.is_empty() => {
                    error(
                        field("values"),
                        format!("operator {} needs at least one value", expr.operator),
                    );
                }
                Operator::Exists | Operator::DoesNotExist if !expr.values.is_empty() => {
                    error(
                        field("values"),
                        format!("operator {} takes no values", expr.operator),
                    );
                }
                _ => {}
            }
            for (j, value) in expr.values.iter().enumerate() {
                if let Some(e) = label_value_error(value) {
                    error(field(&format!("values[{j}]")), e);
                }
            }
            let mut values = expr.values.clone();
            values.sort();
            values.dedup();
            requirements.push(Requirement {
                key: expr.key.clone(),
                operator,
                values,
            });
        }
        if errors.is_empty() {
            Ok(Selector { requirements })
        } else {
            Err(errors)
        }
    }

    /// The requirements, `matchLabels` first.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// Whether the selector selects everything.
    pub fn is_everything(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Each requirement with the label value it saw and whether it held.
    pub fn explain(&self, labels: &Labels) -> Vec<RequirementCheck> {
        self.requirements
            .iter()
            .map(|r| RequirementCheck {
                requirement: r.clone(),
                actual: labels.get(&r.key).cloned(),
                satisfied: r.matches(labels),
            })
            .collect()
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.requirements.is_empty() {
            return f.write_str("<everything>");
        }
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use kalypso_api::LabelSelectorRequirement;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: values.iter().map(|v| v.to_string()).collect(),
        }
    }

    #[test]
    fn empty_selects_everything() {
        let s = Selector::parse(&LabelSelector::default()).unwrap();
        assert!(s.matches(&labels(&[])));
        assert_eq!(s.to_string(), "<everything>");
    }

    #[test]
    fn operators_follow_kubernetes() {
        let sel = LabelSelector {
            match_labels: labels(&[("edge", "true")]),
            match_expressions: vec![
                expr("restricted", "NotIn", &["true"]),
                expr("tier", "In", &["t1", "t0"]),
                expr("zone", "Exists", &[]),
                expr("gone", "DoesNotExist", &[]),
            ],
        };
        let s = Selector::parse(&sel).unwrap();
        assert_eq!(
            s.to_string(),
            "edge=true,restricted notin (true),tier in (t0,t1),zone,!gone"
        );
        assert!(s.matches(&labels(&[("edge", "true"), ("tier", "t1"), ("zone", "a")])));
        assert!(!s.matches(&labels(&[
            ("edge", "true"),
            ("tier", "t1"),
            ("zone", "a"),
            ("restricted", "true")
        ])));
        assert!(!s.matches(&labels(&[("edge", "true"), ("tier", "t2"), ("zone", "a")])));
        let checks = s.explain(&labels(&[("edge", "false")]));
        assert_eq!(checks[0].actual.as_deref(), Some("false"));
        assert!(!checks[0].satisfied);
        assert!(checks[1].satisfied, "absent label satisfies NotIn");
    }

    #[test]
    fn invalid_selectors_report_every_problem() {
        let sel = LabelSelector {
            match_labels: labels(&[("bad key", "v")]),
            match_expressions: vec![
                expr("a", "Within", &[]),
                expr("b", "In", &[]),
                expr("c", "Exists", &["x"]),
            ],
        };
        let errors: Vec<String> = Selector::parse(&sel)
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(errors.len(), 4, "{errors:?}");
        assert!(
            errors[0].starts_with("matchLabels.bad key: invalid label key"),
            "{errors:?}"
        );
        assert_eq!(
            errors[1],
            "matchExpressions[0].operator: unknown operator \"Within\"; use In, NotIn, Exists or DoesNotExist"
        );
        assert_eq!(
            errors[2],
            "matchExpressions[1].values: operator In needs at least one value"
        );
        assert_eq!(
            errors[3],
            "matchExpressions[2].values: operator Exists takes no values"
        );
    }
}
