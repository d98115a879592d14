//! Expressions evaluated on an item: conditions, update actions, projections.

use std::cmp::Ordering;

use aws_sdk_dynamodb::types::AttributeValue;

use super::expr::{Cmp, Cond, Operand, Path, Step, Update};
use super::fault::{Fault, Item};
use super::number::Decimal;

/// The value at `path` of `item`.
pub(crate) fn resolve<'a>(item: &'a Item, path: &Path) -> Option<&'a AttributeValue> {
    let mut steps = path.iter();
    let Some(Step::Key(first)) = steps.next() else {
        return None;
    };
    let mut at = item.get(first)?;
    for step in steps {
        at = match (step, at) {
            (Step::Key(k), AttributeValue::M(m)) => m.get(k)?,
            (Step::Index(i), AttributeValue::L(l)) => l.get(*i)?,
            _ => return None,
        };
    }
    Some(at)
}

/// The name DynamoDB gives a value's type (`S`, `N`, …).
pub(crate) fn type_name(v: &AttributeValue) -> &'static str {
    match v {
        AttributeValue::S(_) => "S",
        AttributeValue::N(_) => "N",
        AttributeValue::B(_) => "B",
        AttributeValue::Bool(_) => "BOOL",
        AttributeValue::Null(_) => "NULL",
        AttributeValue::Ss(_) => "SS",
        AttributeValue::Ns(_) => "NS",
        AttributeValue::Bs(_) => "BS",
        AttributeValue::L(_) => "L",
        AttributeValue::M(_) => "M",
        _ => "?",
    }
}

fn decimal(text: &str) -> Decimal {
    // Stored numbers were checked on the way in.
    Decimal::parse(text).unwrap_or_else(|_| Decimal::parse("0").expect("zero parses"))
}

/// The order of two scalars of one type (strings and binaries by their bytes, numbers by
/// value); `None` for different types or non-scalars.
pub(crate) fn order(a: &AttributeValue, b: &AttributeValue) -> Option<Ordering> {
    match (a, b) {
        (AttributeValue::S(x), AttributeValue::S(y)) => Some(x.as_bytes().cmp(y.as_bytes())),
        (AttributeValue::N(x), AttributeValue::N(y)) => Some(decimal(x).cmp(&decimal(y))),
        (AttributeValue::B(x), AttributeValue::B(y)) => Some(x.as_ref().cmp(y.as_ref())),
        _ => None,
    }
}

/// Whether two values are equal as DynamoDB compares them (numbers by value, sets regardless
/// of order).
pub(crate) fn equal(a: &AttributeValue, b: &AttributeValue) -> bool {
    let same_set = |x: &[String], y: &[String], numbers: bool| {
        x.len() == y.len()
            && x.iter().all(|e| {
                y.iter().any(|f| {
                    if numbers {
                        decimal(e) == decimal(f)
                    } else {
                        e == f
                    }
                })
            })
    };
    match (a, b) {
        (AttributeValue::N(x), AttributeValue::N(y)) => decimal(x) == decimal(y),
        (AttributeValue::Ss(x), AttributeValue::Ss(y)) => same_set(x, y, false),
        (AttributeValue::Ns(x), AttributeValue::Ns(y)) => same_set(x, y, true),
        (AttributeValue::Bs(x), AttributeValue::Bs(y)) => {
            x.len() == y.len() && x.iter().all(|e| y.contains(e))
        }
        (AttributeValue::L(x), AttributeValue::L(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(e, f)| equal(e, f))
        }
        (AttributeValue::M(x), AttributeValue::M(y)) => {
            x.len() == y.len() && x.iter().all(|(k, e)| y.get(k).is_some_and(|f| equal(e, f)))
        }
        _ => a == b,
    }
}

fn size_of(v: &AttributeValue) -> Option<usize> {
    Some(match v {
        AttributeValue::S(s) => s.len(),
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Ss(s) | AttributeValue::Ns(s) => s.len(),
        AttributeValue::Bs(s) => s.len(),
        AttributeValue::L(l) => l.len(),
        AttributeValue::M(m) => m.len(),
        _ => return None,
    })
}

fn operand_in_condition(item: &Item, operand: &Operand) -> Result<Option<AttributeValue>, Fault> {
    Ok(match operand {
        Operand::Path(p) => resolve(item, p).cloned(),
        Operand::Value(v) => Some(v.clone()),
        Operand::Size(p) => match resolve(item, p) {
            None => None,
            Some(v) => {
                let Some(n) = size_of(v) else {
                    return Err(Fault::validation(format!(
                        "Invalid ConditionExpression: Incorrect operand type for operator or function; operator or function: size, operand type: {}",
                        type_name(v)
                    )));
                };
                Some(AttributeValue::N(n.to_string()))
            }
        },
        // The parser does not let these into conditions.
        _ => return Err(Fault::validation("Invalid ConditionExpression")),
    })
}

fn compare(a: Option<&AttributeValue>, cmp: Cmp, b: Option<&AttributeValue>) -> bool {
    match cmp {
        Cmp::Eq => matches!((a, b), (Some(a), Some(b)) if equal(a, b)),
        Cmp::Ne => !matches!((a, b), (Some(a), Some(b)) if equal(a, b)),
        _ => {
            let (Some(a), Some(b)) = (a, b) else {
                return false;
            };
            let Some(o) = order(a, b) else {
                return false;
            };
            match cmp {
                Cmp::Lt => o == Ordering::Less,
                Cmp::Le => o != Ordering::Greater,
                Cmp::Gt => o == Ordering::Greater,
                _ => o != Ordering::Less,
            }
        }
    }
}

/// Whether `cond` holds for `item` (an absent item is the empty item).
pub(crate) fn holds(item: &Item, cond: &Cond) -> Result<bool, Fault> {
    let value = |o: &Operand| operand_in_condition(item, o);
    Ok(match cond {
        Cond::And(..) | Cond::Or(..) => {
            // In order, stopping at the first term that decides.
            let and = matches!(cond, Cond::And(..));
            for term in cond.chain() {
                if holds(item, term)? != and {
                    return Ok(!and);
                }
            }
            and
        }
        Cond::Not(a) => !holds(item, a)?,
        Cond::Exists(p) => resolve(item, p).is_some(),
        Cond::NotExists(p) => resolve(item, p).is_none(),
        Cond::Compare(a, cmp, b) => compare(value(a)?.as_ref(), *cmp, value(b)?.as_ref()),
        Cond::Between(a, low, high) => {
            let (a, low, high) = (value(a)?, value(low)?, value(high)?);
            if let (Some(l), Some(h)) = (&low, &high)
                && order(l, h) == Some(Ordering::Greater)
            {
                return Err(Fault::validation(
                    "Invalid ConditionExpression: The BETWEEN operator requires upper bound to be greater than or equal to lower bound",
                ));
            }
            compare(a.as_ref(), Cmp::Ge, low.as_ref())
                && compare(a.as_ref(), Cmp::Le, high.as_ref())
        }
        Cond::In(a, list) => {
            let a = value(a)?;
            let mut found = false;
            for candidate in list {
                found |= compare(a.as_ref(), Cmp::Eq, value(candidate)?.as_ref());
            }
            found
        }
        Cond::Type(p, t) => {
            let Some(AttributeValue::S(wanted)) = value(t)? else {
                return Err(Fault::validation(
                    "Invalid ConditionExpression: Incorrect operand type for operator or function; operator or function: attribute_type",
                ));
            };
            const TYPES: [&str; 10] = ["S", "N", "B", "BOOL", "NULL", "SS", "NS", "BS", "L", "M"];
            if !TYPES.contains(&wanted.as_str()) {
                return Err(Fault::validation(format!(
                    "Invalid ConditionExpression: Invalid attribute type name found; type: {wanted}, valid types: {{B,NULL,SS,BOOL,L,BS,N,NS,S,M}}"
                )));
            }
            resolve(item, p).is_some_and(|v| type_name(v) == wanted)
        }
        Cond::BeginsWith(a, prefix) => match (value(a)?, value(prefix)?) {
            (Some(AttributeValue::S(s)), Some(AttributeValue::S(p))) => s.starts_with(&p),
            (Some(AttributeValue::B(s)), Some(AttributeValue::B(p))) => {
                s.as_ref().starts_with(p.as_ref())
            }
            (_, Some(AttributeValue::S(_) | AttributeValue::B(_))) => false,
            (_, None) => false,
            (_, Some(p)) => {
                return Err(Fault::validation(format!(
                    "Invalid ConditionExpression: Incorrect operand type for operator or function; operator or function: begins_with, operand type: {}",
                    type_name(&p)
                )));
            }
        },
        Cond::Contains(a, b) => match (value(a)?, value(b)?) {
            (Some(AttributeValue::S(s)), Some(AttributeValue::S(p))) => s.contains(&p),
            (Some(AttributeValue::Ss(s)), Some(AttributeValue::S(p))) => s.contains(&p),
            (Some(AttributeValue::Ns(s)), Some(AttributeValue::N(p))) => {
                s.iter().any(|e| decimal(e) == decimal(&p))
            }
            (Some(AttributeValue::Bs(s)), Some(AttributeValue::B(p))) => s.contains(&p),
            (Some(AttributeValue::B(s)), Some(AttributeValue::B(p))) => {
                let (s, p) = (s.as_ref(), p.as_ref());
                p.is_empty() || s.windows(p.len()).any(|w| w == p)
            }
            (Some(AttributeValue::L(l)), Some(p)) => l.iter().any(|e| equal(e, &p)),
            _ => false,
        },
    })
}

fn missing(path: &Path) -> Fault {
    let name = match path.first() {
        Some(Step::Key(k)) => k.as_str(),
        _ => "",
    };
    Fault::validation(format!(
        "The provided expression refers to an attribute that does not exist in the item ({name})"
    ))
}

fn wrong_type(operator: &str, v: &AttributeValue) -> Fault {
    Fault::validation(format!(
        "An operand in the update expression has an incorrect data type (operator or function: {operator}, operand type: {})",
        type_name(v)
    ))
}

/// The value of the right side of a `SET` action, read from the item before the update.
fn set_value(item: &Item, operand: &Operand) -> Result<AttributeValue, Fault> {
    match operand {
        Operand::Path(p) => resolve(item, p).cloned().ok_or_else(|| missing(p)),
        Operand::Value(v) => Ok(v.clone()),
        Operand::IfNotExists(p, fallback) => match resolve(item, p) {
            Some(v) => Ok(v.clone()),
            None => set_value(item, fallback),
        },
        Operand::ListAppend(a, b) => match (set_value(item, a)?, set_value(item, b)?) {
            (AttributeValue::L(mut x), AttributeValue::L(y)) => {
                x.extend(y);
                Ok(AttributeValue::L(x))
            }
            (AttributeValue::L(_), other) | (other, _) => Err(wrong_type("list_append", &other)),
        },
        Operand::Plus(a, b) | Operand::Minus(a, b) => {
            let operator = if matches!(operand, Operand::Plus(..)) {
                "+"
            } else {
                "-"
            };
            let (x, y) = (set_value(item, a)?, set_value(item, b)?);
            let (AttributeValue::N(x), AttributeValue::N(y)) = (&x, &y) else {
                let culprit = if matches!(x, AttributeValue::N(_)) {
                    &y
                } else {
                    &x
                };
                return Err(wrong_type(operator, culprit));
            };
            let y = if operator == "-" {
                decimal(y).negated()
            } else {
                decimal(y)
            };
            Ok(AttributeValue::N(decimal(x).add(&y)?.to_text()))
        }
        Operand::Size(_) => Err(Fault::validation(
            "Invalid UpdateExpression: The function is not allowed in an update expression; function: size",
        )),
    }
}

/// Writes `value` at `path` (creating the top-level attribute; nested parents must exist).
fn put(item: &mut Item, path: &Path, value: AttributeValue) -> Result<(), Fault> {
    let invalid = || {
        Fault::validation(
            "The document path provided in the update expression is invalid for update",
        )
    };
    let (Some(Step::Key(first)), rest) = (path.first(), &path[1..]) else {
        return Err(invalid());
    };
    if rest.is_empty() {
        item.insert(first.clone(), value);
        return Ok(());
    }
    let mut at = item.get_mut(first).ok_or_else(invalid)?;
    for (i, step) in rest.iter().enumerate() {
        let last = i + 1 == rest.len();
        at = match (step, at) {
            (Step::Key(k), AttributeValue::M(m)) => {
                if last {
                    m.insert(k.clone(), value);
                    return Ok(());
                }
                m.get_mut(k).ok_or_else(invalid)?
            }
            (Step::Index(n), AttributeValue::L(l)) => {
                if last {
                    if *n < l.len() {
                        l[*n] = value;
                    } else {
                        l.push(value);
                    }
                    return Ok(());
                }
                l.get_mut(*n).ok_or_else(invalid)?
            }
            _ => return Err(invalid()),
        };
    }
    Ok(())
}

/// Removes the value at `path`, if any.
fn take(item: &mut Item, path: &Path) {
    let (Some(Step::Key(first)), rest) = (path.first(), &path[1..]) else {
        return;
    };
    if rest.is_empty() {
        item.remove(first);
        return;
    }
    let Some(mut at) = item.get_mut(first) else {
        return;
    };
    for (i, step) in rest.iter().enumerate() {
        let last = i + 1 == rest.len();
        let next = match (step, at) {
            (Step::Key(k), AttributeValue::M(m)) => {
                if last {
                    m.remove(k);
                    return;
                }
                m.get_mut(k)
            }
            (Step::Index(n), AttributeValue::L(l)) => {
                if last {
                    if *n < l.len() {
                        l.remove(*n);
                    }
                    return;
                }
                l.get_mut(*n)
            }
            _ => return,
        };
        let Some(next) = next else {
            return;
        };
        at = next;
    }
}

fn overlap(a: &Path, b: &Path) -> bool {
    let n = a.len().min(b.len());
    a[..n] == b[..n]
}

/// `item` with `update` applied; every right side reads the item as it was before.
///
/// # Errors
/// A `ValidationException` as DynamoDB raises it: overlapping paths, a missing operand, a
/// wrong type, a number it cannot store.
pub(crate) fn apply(item: &Item, update: &Update) -> Result<Item, Fault> {
    let paths: Vec<&Path> = update.paths().collect();
    for (i, a) in paths.iter().enumerate() {
        if let Some(b) = paths[..i].iter().find(|b| overlap(a, b)) {
            return Err(Fault::validation(format!(
                "Invalid UpdateExpression: Two document paths overlap with each other; must remove or rewrite one of these paths; path one: {}, path two: {}",
                show(b),
                show(a)
            )));
        }
    }
    let mut out = item.clone();
    for (path, operand) in &update.set {
        let value = set_value(item, operand)?;
        put(&mut out, path, value)?;
    }
    for path in &update.remove {
        take(&mut out, path);
    }
    for (path, value) in &update.add {
        if !matches!(
            value,
            AttributeValue::N(_)
                | AttributeValue::Ss(_)
                | AttributeValue::Ns(_)
                | AttributeValue::Bs(_)
        ) {
            return Err(wrong_type("ADD", value));
        }
        let merged = match (resolve(item, path), value) {
            (None, _) => value.clone(),
            (Some(AttributeValue::N(x)), AttributeValue::N(y)) => {
                AttributeValue::N(decimal(x).add(&decimal(y))?.to_text())
            }
            (Some(AttributeValue::Ss(x)), AttributeValue::Ss(y)) => {
                AttributeValue::Ss(union(x, y, |a, b| a == b))
            }
            (Some(AttributeValue::Ns(x)), AttributeValue::Ns(y)) => {
                AttributeValue::Ns(union(x, y, |a, b| decimal(a) == decimal(b)))
            }
            (Some(AttributeValue::Bs(x)), AttributeValue::Bs(y)) => {
                AttributeValue::Bs(union(x, y, |a, b| a == b))
            }
            (Some(existing), _) => return Err(wrong_type("ADD", existing)),
        };
        put(&mut out, path, merged)?;
    }
    for (path, value) in &update.delete {
        let remaining = match (resolve(item, path), value) {
            (None, AttributeValue::Ss(_) | AttributeValue::Ns(_) | AttributeValue::Bs(_)) => {
                continue;
            }
            (Some(AttributeValue::Ss(x)), AttributeValue::Ss(y)) => {
                let left: Vec<String> = x.iter().filter(|e| !y.contains(e)).cloned().collect();
                (!left.is_empty()).then_some(AttributeValue::Ss(left))
            }
            (Some(AttributeValue::Ns(x)), AttributeValue::Ns(y)) => {
                let left: Vec<String> = x
                    .iter()
                    .filter(|e| !y.iter().any(|f| decimal(e) == decimal(f)))
                    .cloned()
                    .collect();
                (!left.is_empty()).then_some(AttributeValue::Ns(left))
            }
            (Some(AttributeValue::Bs(x)), AttributeValue::Bs(y)) => {
                let left: Vec<_> = x.iter().filter(|e| !y.contains(e)).cloned().collect();
                (!left.is_empty()).then_some(AttributeValue::Bs(left))
            }
            (
                Some(existing),
                AttributeValue::Ss(_) | AttributeValue::Ns(_) | AttributeValue::Bs(_),
            ) => {
                return Err(wrong_type("DELETE", existing));
            }
            (_, other) => return Err(wrong_type("DELETE", other)),
        };
        match remaining {
            Some(v) => put(&mut out, path, v)?,
            None => take(&mut out, path),
        }
    }
    Ok(out)
}

fn union<T: Clone>(x: &[T], y: &[T], same: impl Fn(&T, &T) -> bool) -> Vec<T> {
    let mut out = x.to_vec();
    for e in y {
        if !out.iter().any(|f| same(f, e)) {
            out.push(e.clone());
        }
    }
    out
}

fn show(path: &Path) -> String {
    let mut out = String::from("[");
    for (i, step) in path.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        match step {
            Step::Key(k) => out.push_str(k),
            Step::Index(n) => out.push_str(&format!("[{n}]")),
        }
    }
    out.push(']');
    out
}

/// The attributes of `item` named by `paths` (a projection).
pub(crate) fn project(item: &Item, paths: &[Path]) -> Item {
    let mut out = Item::new();
    for path in paths {
        let Some(value) = resolve(item, path) else {
            continue;
        };
        let Some(Step::Key(first)) = path.first() else {
            continue;
        };
        if path.len() == 1 {
            out.insert(first.clone(), value.clone());
            continue;
        }
        // A nested projection keeps the enclosing maps, holding only the projected parts.
        let mut nested = value.clone();
        for step in path[1..].iter().rev() {
            nested = match step {
                Step::Key(k) => AttributeValue::M([(k.clone(), nested)].into_iter().collect()),
                Step::Index(_) => AttributeValue::L(vec![nested]),
            };
        }
        merge(
            out.entry(first.clone())
                .or_insert(AttributeValue::Null(true)),
            nested,
        );
    }
    out
}

fn merge(into: &mut AttributeValue, part: AttributeValue) {
    match (into, part) {
        (AttributeValue::M(a), AttributeValue::M(b)) => {
            for (k, v) in b {
                match a.get_mut(&k) {
                    Some(existing) => merge(existing, v),
                    None => {
                        a.insert(k, v);
                    }
                }
            }
        }
        (AttributeValue::L(a), AttributeValue::L(b)) => a.extend(b),
        (slot, part) => *slot = part,
    }
}

#[cfg(test)]
mod tests {
    use super::super::expr::{self, Placeholders};
    use super::*;

    fn item(pairs: &[(&str, AttributeValue)]) -> Item {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect()
    }

    fn n(v: &str) -> AttributeValue {
        AttributeValue::N(v.to_owned())
    }

    fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.to_owned())
    }

    fn placeholders(values: &[(&str, AttributeValue)]) -> Placeholders {
        Placeholders::new(
            Default::default(),
            values
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
        )
    }

    fn check(it: &Item, text: &str, values: &[(&str, AttributeValue)]) -> Result<bool, Fault> {
        let mut p = placeholders(values);
        holds(it, &expr::condition(text, &mut p)?)
    }

    fn updated(it: &Item, text: &str, values: &[(&str, AttributeValue)]) -> Result<Item, Fault> {
        let mut p = placeholders(values);
        apply(it, &expr::update(text, &mut p)?)
    }

    #[test]
    fn comparisons_follow_dynamodb() {
        let it = item(&[("tk", n("1500")), ("id", s("b")), ("neg", n("-3"))]);
        let v = [(":a", n("1000")), (":s", s("a")), (":big", n("1e30"))];
        assert!(check(&it, "tk >= :a", &v).unwrap());
        assert!(!check(&it, "tk < :a", &v).unwrap());
        assert!(check(&it, "neg < :a AND tk < :big", &v).unwrap());
        // Strings by bytes; a type mismatch is false, not an error.
        assert!(check(&it, "id > :s", &v).unwrap());
        assert!(!check(&it, "id > :a", &v).unwrap());
        assert!(!check(&it, "id = :a", &v).unwrap());
        // A missing attribute: every comparison false, except <>.
        assert!(!check(&it, "nothing = :a", &v).unwrap());
        assert!(!check(&it, "nothing < :a", &v).unwrap());
        assert!(check(&it, "nothing <> :a", &v).unwrap());
        assert!(check(&it, "NOT (nothing = :a)", &v).unwrap());
        assert!(check(&it, "tk BETWEEN :a AND :big", &v).unwrap());
        assert!(check(&it, "id IN (:s, :a)", &v).is_ok_and(|b| !b));
        assert!(
            check(
                &it,
                "tk IN (:s, :a, :big) OR id = :s OR attribute_exists(tk)",
                &v
            )
            .unwrap()
        );
        // Equal values of different spellings.
        assert!(check(&item(&[("x", n("1"))]), "x = :one", &[(":one", n("1.0"))]).unwrap());
    }

    #[test]
    fn functions_follow_dynamodb() {
        let it = item(&[
            ("name", s("prefix-rest")),
            ("tags", AttributeValue::Ss(vec!["a".into(), "b".into()])),
            ("n", n("1")),
        ]);
        let v = [
            (":p", s("prefix")),
            (":a", s("a")),
            (":t", s("SS")),
            (":two", n("2")),
        ];
        assert!(check(&it, "begins_with(name, :p)", &v).unwrap());
        assert!(!check(&it, "begins_with(n, :p)", &v).unwrap());
        assert!(check(&it, "contains(tags, :a) AND contains(name, :a)", &v).is_ok_and(|b| !b));
        assert!(check(&it, "contains(tags, :a)", &v).unwrap());
        assert!(check(&it, "attribute_type(tags, :t)", &v).unwrap());
        assert!(check(&it, "size(tags) = :two", &v).unwrap());
        assert!(check(&it, "size(n) = :two", &v).is_err());
        assert!(check(&it, "attribute_type(n, :p)", &v).is_err());
        assert!(check(&it, "n BETWEEN :two AND :a", &v).is_ok());
        assert!(check(&it, "n BETWEEN :two AND :two", &v).is_ok_and(|b| !b));
    }

    #[test]
    fn updates_read_the_item_before_the_update() {
        let it = item(&[("a", n("5")), ("b", n("7")), ("gone", s("x"))]);
        let v = [(":one", n("1")), (":zero", n("0"))];
        let out = updated(
            &it,
            "SET a = b, b = a, c = if_not_exists(c, :zero) + :one REMOVE gone",
            &v,
        )
        .unwrap();
        assert_eq!(out["a"], n("7"));
        assert_eq!(out["b"], n("5"));
        assert_eq!(out["c"], n("1"));
        assert!(!out.contains_key("gone"));
        let out = updated(&it, "SET a = a - :one ADD b :one, fresh :one", &v).unwrap();
        assert_eq!(out["a"], n("4"));
        assert_eq!(out["b"], n("8"));
        assert_eq!(out["fresh"], n("1"));
    }

    #[test]
    fn updates_refuse_what_dynamodb_refuses() {
        let it = item(&[("a", n("5")), ("s", s("x"))]);
        let v = [(":one", n("1")), (":s", s("y"))];
        assert!(updated(&it, "SET a = missing + :one", &v).is_err());
        assert!(updated(&it, "SET a = s + :one", &v).is_err());
        assert!(updated(&it, "SET a = :one REMOVE a", &v).is_err());
        assert!(updated(&it, "ADD s :one", &v).is_err());
        assert!(updated(&it, "ADD a :s", &v).is_err());
        let huge = [(":max", n("9.9999999999999999999999999999999999999e125"))];
        let it = item(&[("a", huge[0].1.clone())]);
        assert!(updated(&it, "ADD a :max", &huge).is_err());
    }

    #[test]
    fn sets_gain_and_lose_members() {
        let it = item(&[("ss", AttributeValue::Ss(vec!["a".into()]))]);
        let v = [
            (":bc", AttributeValue::Ss(vec!["b".into(), "c".into()])),
            (":ab", AttributeValue::Ss(vec!["a".into(), "b".into()])),
            (":a", AttributeValue::Ss(vec!["a".into()])),
        ];
        let out = updated(&it, "ADD ss :bc", &v[..1]).unwrap();
        assert_eq!(
            out["ss"],
            AttributeValue::Ss(vec!["a".into(), "b".into(), "c".into()])
        );
        let out = updated(&out, "DELETE ss :ab", &v[1..2]).unwrap();
        assert_eq!(out["ss"], AttributeValue::Ss(vec!["c".into()]));
        // A set emptied by DELETE is removed.
        let out = updated(&it, "DELETE ss :a", &v[2..]).unwrap();
        assert!(!out.contains_key("ss"));
    }

    #[test]
    fn nested_paths_are_read_written_and_projected() {
        let it = item(&[(
            "m",
            AttributeValue::M(
                [("k".to_owned(), AttributeValue::L(vec![n("1"), n("2")]))]
                    .into_iter()
                    .collect(),
            ),
        )]);
        let v = [(":nine", n("9")), (":l", AttributeValue::L(vec![n("3")]))];
        let out = updated(&it, "SET m.k[1] = :nine, m.j = list_append(m.k, :l)", &v).unwrap();
        let projected = project(&out, &[vec![Step::Key("m".into()), Step::Key("j".into())]]);
        assert_eq!(
            projected["m"],
            AttributeValue::M(
                [(
                    "j".to_owned(),
                    AttributeValue::L(vec![n("1"), n("2"), n("3")])
                )]
                .into_iter()
                .collect()
            )
        );
        assert_eq!(
            resolve(
                &out,
                &vec![Step::Key("m".into()), Step::Key("k".into()), Step::Index(1)]
            ),
            Some(&n("9"))
        );
        assert!(updated(&it, "SET nowhere.k = :nine", &v[..1]).is_err());
    }
}
