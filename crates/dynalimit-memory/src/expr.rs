//! The expression language of DynamoDB, parsed: update expressions (`SET`, `REMOVE`, `ADD`,
//! `DELETE`), condition, filter and key-condition expressions, projections; `#name` and
//! `:value` placeholders resolved as they are read, and every declared one required to be used.

use std::collections::{HashMap, HashSet};

use aws_sdk_dynamodb::types::AttributeValue;

use super::fault::Fault;

/// One step of a document path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Step {
    /// A map key (a top-level attribute name first).
    Key(String),
    /// A list index.
    Index(usize),
}

/// A document path: an attribute name, then map keys and list indexes.
pub(crate) type Path = Vec<Step>;

/// A value in an expression.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Operand {
    /// The value at a path of the item.
    Path(Path),
    /// A `:value`.
    Value(AttributeValue),
    /// `size(path)`.
    Size(Path),
    /// `if_not_exists(path, operand)`.
    IfNotExists(Path, Box<Operand>),
    /// `list_append(a, b)`.
    ListAppend(Box<Operand>, Box<Operand>),
    /// `a + b`.
    Plus(Box<Operand>, Box<Operand>),
    /// `a - b`.
    Minus(Box<Operand>, Box<Operand>),
}

/// A comparator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cmp {
    /// `=`
    Eq,
    /// `<>`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

/// A condition.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Cond {
    /// `a op b`
    Compare(Operand, Cmp, Operand),
    /// `a BETWEEN low AND high`
    Between(Operand, Operand, Operand),
    /// `a IN (b, c, …)`
    In(Operand, Vec<Operand>),
    /// `a AND b`
    And(Box<Cond>, Box<Cond>),
    /// `a OR b`
    Or(Box<Cond>, Box<Cond>),
    /// `NOT a`
    Not(Box<Cond>),
    /// `attribute_exists(path)`
    Exists(Path),
    /// `attribute_not_exists(path)`
    NotExists(Path),
    /// `attribute_type(path, type)`
    Type(Path, Operand),
    /// `begins_with(a, prefix)`
    BeginsWith(Operand, Operand),
    /// `contains(a, b)`
    Contains(Operand, Operand),
}

impl Cond {
    /// The terms of a chain of one connective (`a AND b AND c`), left to right; `[self]` for
    /// any other condition. The parser folds a chain to the left, so its depth is its length:
    /// walking the left spine here keeps the readers of a 300-operator condition from
    /// recursing that deep.
    pub(crate) fn chain(&self) -> Vec<&Cond> {
        let mut terms = Vec::new();
        let mut left = self;
        while let (Cond::And(..), Cond::And(a, b)) | (Cond::Or(..), Cond::Or(a, b)) = (self, left) {
            terms.push(&**b);
            left = a;
        }
        terms.push(left);
        terms.reverse();
        terms
    }
}

/// A parsed update expression.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Update {
    /// `SET path = value`.
    pub(crate) set: Vec<(Path, Operand)>,
    /// `REMOVE path`.
    pub(crate) remove: Vec<Path>,
    /// `ADD path value`.
    pub(crate) add: Vec<(Path, AttributeValue)>,
    /// `DELETE path value`.
    pub(crate) delete: Vec<(Path, AttributeValue)>,
}

impl Update {
    /// Every path the update writes, in clause order.
    pub(crate) fn paths(&self) -> impl Iterator<Item = &Path> {
        self.set
            .iter()
            .map(|(p, _)| p)
            .chain(&self.remove)
            .chain(self.add.iter().map(|(p, _)| p))
            .chain(self.delete.iter().map(|(p, _)| p))
    }
}

/// The `ExpressionAttributeNames` and `ExpressionAttributeValues` of one request, and which of
/// them its expressions used.
#[derive(Debug, Default)]
pub(crate) struct Placeholders {
    names: HashMap<String, String>,
    values: HashMap<String, AttributeValue>,
    used_names: HashSet<String>,
    used_values: HashSet<String>,
}

impl Placeholders {
    /// The placeholders of a request.
    pub(crate) fn new(
        names: HashMap<String, String>,
        values: HashMap<String, AttributeValue>,
    ) -> Placeholders {
        Placeholders {
            names,
            values,
            ..Placeholders::default()
        }
    }

    fn name(&mut self, token: &str) -> Result<String, Fault> {
        let name = self.names.get(token).cloned().ok_or_else(|| {
            Fault::validation(format!(
                "Invalid expression: An expression attribute name used in the document path is not defined; attribute name: {token}"
            ))
        })?;
        self.used_names.insert(token.to_owned());
        Ok(name)
    }

    fn value(&mut self, token: &str) -> Result<AttributeValue, Fault> {
        let value = self.values.get(token).cloned().ok_or_else(|| {
            Fault::validation(format!(
                "Invalid expression: An expression attribute value used in expression is not defined; attribute value: {token}"
            ))
        })?;
        self.used_values.insert(token.to_owned());
        Ok(value)
    }

    /// Refuses names or values that no expression of the request used, as DynamoDB does.
    pub(crate) fn check_all_used(&self) -> Result<(), Fault> {
        fn unused<'a>(declared: Vec<&'a String>, used: &HashSet<String>) -> Vec<&'a str> {
            let mut out: Vec<&str> = declared
                .into_iter()
                .filter(|k| !used.contains(*k))
                .map(String::as_str)
                .collect();
            out.sort_unstable();
            out
        }
        let names = unused(self.names.keys().collect(), &self.used_names);
        if !names.is_empty() {
            return Err(Fault::validation(format!(
                "Value provided in ExpressionAttributeNames unused in expressions: keys: {{{}}}",
                names.join(", ")
            )));
        }
        let values = unused(self.values.keys().collect(), &self.used_values);
        if !values.is_empty() {
            return Err(Fault::validation(format!(
                "Value provided in ExpressionAttributeValues unused in expressions: keys: {{{}}}",
                values.join(", ")
            )));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    /// An attribute name written inline, a keyword or a function name.
    Word(String),
    /// `#name`
    Name(String),
    /// `:value`
    Value(String),
    /// A list index's digits.
    Number(usize),
    /// Punctuation and comparators.
    Sym(&'static str),
}

fn tokens(text: &str) -> Result<Vec<Token>, Fault> {
    let bad =
        |what: String| Fault::validation(format!("Invalid expression: {what}; expression: {text}"));
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let word_char = |c: char| c.is_ascii_alphanumeric() || c == '_';
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        match c {
            '#' | ':' => {
                i += 1;
                while i < chars.len() && word_char(chars[i]) {
                    i += 1;
                }
                if i == start + 1 {
                    return Err(bad(format!("Syntax error; token: \"{c}\"")));
                }
                let token: String = chars[start..i].iter().collect();
                out.push(if c == '#' {
                    Token::Name(token)
                } else {
                    Token::Value(token)
                });
            }
            '0'..='9' => {
                while i < chars.len() && chars[i].is_ascii_digit() {
                    i += 1;
                }
                let digits: String = chars[start..i].iter().collect();
                let n = digits
                    .parse()
                    .map_err(|_| bad(format!("Syntax error; token: \"{digits}\"")))?;
                out.push(Token::Number(n));
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                while i < chars.len() && word_char(chars[i]) {
                    i += 1;
                }
                out.push(Token::Word(chars[start..i].iter().collect()));
            }
            _ => {
                let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
                let sym = match two.as_str() {
                    "<>" => Some("<>"),
                    "<=" => Some("<="),
                    ">=" => Some(">="),
                    _ => None,
                };
                if let Some(sym) = sym {
                    out.push(Token::Sym(sym));
                    i += 2;
                    continue;
                }
                let sym = match c {
                    '(' => "(",
                    ')' => ")",
                    ',' => ",",
                    '.' => ".",
                    '[' => "[",
                    ']' => "]",
                    '=' => "=",
                    '<' => "<",
                    '>' => ">",
                    '+' => "+",
                    '-' => "-",
                    _ => return Err(bad(format!("Syntax error; token: \"{c}\""))),
                };
                out.push(Token::Sym(sym));
                i += 1;
            }
        }
    }
    Ok(out)
}

/// Where an operand stands, which decides the functions it may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// A condition or filter: `size` is allowed.
    Condition,
    /// The right side of `SET`: `if_not_exists`, `list_append`, `+` and `-` are allowed.
    Set,
}

struct Parser<'a> {
    text: &'a str,
    tokens: Vec<Token>,
    at: usize,
    placeholders: &'a mut Placeholders,
}

fn keyword(token: Option<&Token>, word: &str) -> bool {
    matches!(token, Some(Token::Word(w)) if w.eq_ignore_ascii_case(word))
}

impl<'a> Parser<'a> {
    fn new(text: &'a str, placeholders: &'a mut Placeholders) -> Result<Parser<'a>, Fault> {
        let tokens = tokens(text)?;
        if tokens.is_empty() {
            return Err(Fault::validation(
                "Invalid expression: The expression can not be empty;",
            ));
        }
        Ok(Parser {
            text,
            tokens,
            at: 0,
            placeholders,
        })
    }

    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn peek_at(&self, ahead: usize) -> Option<&Token> {
        self.tokens.get(self.at + ahead)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.at).cloned();
        self.at += 1;
        t
    }

    fn error(&self) -> Fault {
        let near = match self.peek() {
            None => "<EOF>".to_owned(),
            Some(Token::Word(w) | Token::Name(w) | Token::Value(w)) => w.clone(),
            Some(Token::Number(n)) => n.to_string(),
            Some(Token::Sym(s)) => (*s).to_owned(),
        };
        Fault::validation(format!(
            "Invalid expression: Syntax error; token: \"{near}\"; expression: {}",
            self.text
        ))
    }

    fn expect(&mut self, sym: &'static str) -> Result<(), Fault> {
        if self.peek() == Some(&Token::Sym(sym)) {
            self.at += 1;
            Ok(())
        } else {
            Err(self.error())
        }
    }

    fn eat(&mut self, sym: &'static str) -> bool {
        if self.peek() == Some(&Token::Sym(sym)) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn eat_keyword(&mut self, word: &str) -> bool {
        if keyword(self.peek(), word) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn finish(&self) -> Result<(), Fault> {
        if self.at == self.tokens.len() {
            Ok(())
        } else {
            Err(self.error())
        }
    }

    fn path_element(&mut self) -> Result<String, Fault> {
        match self.next() {
            Some(Token::Name(token)) => self.placeholders.name(&token),
            Some(Token::Word(word)) => Ok(word),
            _ => {
                self.at -= 1;
                Err(self.error())
            }
        }
    }

    fn path(&mut self) -> Result<Path, Fault> {
        let mut path = vec![Step::Key(self.path_element()?)];
        loop {
            if self.eat(".") {
                path.push(Step::Key(self.path_element()?));
            } else if self.eat("[") {
                match self.next() {
                    Some(Token::Number(n)) => path.push(Step::Index(n)),
                    _ => {
                        self.at -= 1;
                        return Err(self.error());
                    }
                }
                self.expect("]")?;
            } else {
                return Ok(path);
            }
        }
    }

    fn function_name(&self) -> Option<String> {
        match (self.peek(), self.peek_at(1)) {
            (Some(Token::Word(w)), Some(Token::Sym("("))) => Some(w.clone()),
            _ => None,
        }
    }

    fn operand(&mut self, place: Place) -> Result<Operand, Fault> {
        let first = self.single(place)?;
        if place == Place::Set {
            if self.eat("+") {
                let second = self.single(place)?;
                return Ok(Operand::Plus(Box::new(first), Box::new(second)));
            }
            if self.eat("-") {
                let second = self.single(place)?;
                return Ok(Operand::Minus(Box::new(first), Box::new(second)));
            }
        }
        Ok(first)
    }

    fn single(&mut self, place: Place) -> Result<Operand, Fault> {
        if let Some(Token::Value(token)) = self.peek().cloned() {
            self.at += 1;
            return Ok(Operand::Value(self.placeholders.value(&token)?));
        }
        if let Some(function) = self.function_name() {
            self.at += 2;
            let operand = match (function.as_str(), place) {
                ("size", Place::Condition) => Operand::Size(self.path()?),
                ("if_not_exists", Place::Set) => {
                    let path = self.path()?;
                    self.expect(",")?;
                    let fallback = self.single(place)?;
                    Operand::IfNotExists(path, Box::new(fallback))
                }
                ("list_append", Place::Set) => {
                    let a = self.single(place)?;
                    self.expect(",")?;
                    let b = self.single(place)?;
                    Operand::ListAppend(Box::new(a), Box::new(b))
                }
                _ => {
                    return Err(Fault::validation(format!(
                        "Invalid expression: The function is not allowed to be used this way in an expression; function: {function}"
                    )));
                }
            };
            self.expect(")")?;
            return Ok(operand);
        }
        Ok(Operand::Path(self.path()?))
    }

    fn condition(&mut self) -> Result<Cond, Fault> {
        self.chain("OR", Parser::conjunction, Cond::Or)
    }

    fn conjunction(&mut self) -> Result<Cond, Fault> {
        self.chain("AND", Parser::negation, Cond::And)
    }

    /// `operand (keyword operand)*`, folded to the left.
    fn chain(
        &mut self,
        keyword: &str,
        operand: fn(&mut Parser<'a>) -> Result<Cond, Fault>,
        join: fn(Box<Cond>, Box<Cond>) -> Cond,
    ) -> Result<Cond, Fault> {
        let mut left = operand(self)?;
        while self.eat_keyword(keyword) {
            let right = operand(self)?;
            left = join(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn negation(&mut self) -> Result<Cond, Fault> {
        if self.eat_keyword("NOT") {
            return Ok(Cond::Not(Box::new(self.negation()?)));
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<Cond, Fault> {
        if self.eat("(") {
            let inner = self.condition()?;
            self.expect(")")?;
            return Ok(inner);
        }
        if let Some(function) = self.function_name()
            && function != "size"
        {
            self.at += 2;
            let cond = match function.as_str() {
                "attribute_exists" => Cond::Exists(self.path()?),
                "attribute_not_exists" => Cond::NotExists(self.path()?),
                "attribute_type" => {
                    let path = self.path()?;
                    self.expect(",")?;
                    Cond::Type(path, self.single(Place::Condition)?)
                }
                "begins_with" | "contains" => {
                    let a = self.single(Place::Condition)?;
                    self.expect(",")?;
                    let b = self.single(Place::Condition)?;
                    if function == "contains" {
                        Cond::Contains(a, b)
                    } else {
                        Cond::BeginsWith(a, b)
                    }
                }
                _ => {
                    return Err(Fault::validation(format!(
                        "Invalid expression: Invalid function name; function: {function}"
                    )));
                }
            };
            self.expect(")")?;
            return Ok(cond);
        }
        let left = self.operand(Place::Condition)?;
        if self.eat_keyword("BETWEEN") {
            let low = self.operand(Place::Condition)?;
            if !self.eat_keyword("AND") {
                return Err(self.error());
            }
            let high = self.operand(Place::Condition)?;
            return Ok(Cond::Between(left, low, high));
        }
        if self.eat_keyword("IN") {
            self.expect("(")?;
            let mut list = vec![self.operand(Place::Condition)?];
            while self.eat(",") {
                list.push(self.operand(Place::Condition)?);
            }
            self.expect(")")?;
            return Ok(Cond::In(left, list));
        }
        let cmp = match self.next() {
            Some(Token::Sym("=")) => Cmp::Eq,
            Some(Token::Sym("<>")) => Cmp::Ne,
            Some(Token::Sym("<")) => Cmp::Lt,
            Some(Token::Sym("<=")) => Cmp::Le,
            Some(Token::Sym(">")) => Cmp::Gt,
            Some(Token::Sym(">=")) => Cmp::Ge,
            _ => {
                self.at -= 1;
                return Err(self.error());
            }
        };
        let right = self.operand(Place::Condition)?;
        Ok(Cond::Compare(left, cmp, right))
    }

    fn update(&mut self) -> Result<Update, Fault> {
        let mut update = Update::default();
        let mut seen: Vec<String> = Vec::new();
        while self.peek().is_some() {
            let Some(Token::Word(clause)) = self.next() else {
                self.at -= 1;
                return Err(self.error());
            };
            let clause = clause.to_ascii_uppercase();
            if seen.contains(&clause) {
                return Err(Fault::validation(format!(
                    "Invalid UpdateExpression: The \"{clause}\" section can only be used once in an update expression;"
                )));
            }
            loop {
                match clause.as_str() {
                    "SET" => {
                        let path = self.path()?;
                        self.expect("=")?;
                        update.set.push((path, self.operand(Place::Set)?));
                    }
                    "REMOVE" => update.remove.push(self.path()?),
                    "ADD" | "DELETE" => {
                        let path = self.path()?;
                        let Operand::Value(value) = self.single(Place::Condition)? else {
                            return Err(self.error());
                        };
                        if clause == "ADD" {
                            update.add.push((path, value));
                        } else {
                            update.delete.push((path, value));
                        }
                    }
                    _ => {
                        self.at -= 1;
                        return Err(self.error());
                    }
                }
                if !self.eat(",") {
                    break;
                }
            }
            seen.push(clause);
        }
        Ok(update)
    }
}

/// DynamoDB's longest expression string, bytes.
const MAX_EXPRESSION_BYTES: usize = 4096;
/// DynamoDB's most operators and functions in one condition.
const MAX_OPERATORS: usize = 300;

/// Refuses an expression longer than DynamoDB takes, as DynamoDB words it.
fn within_size(kind: &str, text: &str) -> Result<(), Fault> {
    if text.len() > MAX_EXPRESSION_BYTES {
        return Err(Fault::validation(format!(
            "Invalid {kind}: Expression size has exceeded the maximum allowed size; \
             expression size: {}",
            text.len()
        )));
    }
    Ok(())
}

impl Operand {
    /// Operators and functions, as DynamoDB counts them.
    fn operators(&self) -> usize {
        match self {
            Operand::Path(_) | Operand::Value(_) => 0,
            Operand::Size(_) => 1,
            Operand::IfNotExists(_, b) => 1 + b.operators(),
            Operand::ListAppend(a, b) | Operand::Plus(a, b) | Operand::Minus(a, b) => {
                1 + a.operators() + b.operators()
            }
        }
    }
}

impl Cond {
    /// Operators and functions, as DynamoDB counts them (a comparator, `AND`, `OR`, `NOT`,
    /// `BETWEEN`, `IN` and each function one).
    fn operators(&self) -> usize {
        match self {
            Cond::Compare(a, _, b) | Cond::BeginsWith(a, b) | Cond::Contains(a, b) => {
                1 + a.operators() + b.operators()
            }
            Cond::Between(a, low, high) => 1 + a.operators() + low.operators() + high.operators(),
            Cond::In(a, list) => {
                1 + a.operators() + list.iter().map(Operand::operators).sum::<usize>()
            }
            Cond::And(..) | Cond::Or(..) => {
                let terms = self.chain();
                terms.len() - 1 + terms.iter().map(|t| t.operators()).sum::<usize>()
            }
            Cond::Not(a) => 1 + a.operators(),
            Cond::Exists(_) | Cond::NotExists(_) => 1,
            Cond::Type(_, t) => 1 + t.operators(),
        }
    }
}

/// Parses a condition of request parameter `kind` (`ConditionExpression`,
/// `KeyConditionExpression`, `FilterExpression`), refusing one longer than 4 KB or with more
/// than 300 operators and functions, as DynamoDB does.
pub(crate) fn bounded_condition(
    kind: &str,
    text: &str,
    placeholders: &mut Placeholders,
) -> Result<Cond, Fault> {
    within_size(kind, text)?;
    let cond = condition(text, placeholders)?;
    let count = cond.operators();
    if count > MAX_OPERATORS {
        return Err(Fault::validation(format!(
            "Invalid {kind}: The expression contains too many operators; operator count: {count}"
        )));
    }
    Ok(cond)
}

/// Parses an update expression, refusing one longer than 4 KB as DynamoDB does.
pub(crate) fn update(text: &str, placeholders: &mut Placeholders) -> Result<Update, Fault> {
    within_size("UpdateExpression", text)?;
    let mut parser = Parser::new(text, placeholders)?;
    let update = parser.update()?;
    parser.finish()?;
    Ok(update)
}

/// Parses a condition (also a filter or a key condition).
pub(crate) fn condition(text: &str, placeholders: &mut Placeholders) -> Result<Cond, Fault> {
    let mut parser = Parser::new(text, placeholders)?;
    let cond = parser.condition()?;
    parser.finish()?;
    Ok(cond)
}

/// Parses a projection: paths separated by commas.
pub(crate) fn projection(text: &str, placeholders: &mut Placeholders) -> Result<Vec<Path>, Fault> {
    let mut parser = Parser::new(text, placeholders)?;
    let mut paths = vec![parser.path()?];
    while parser.eat(",") {
        paths.push(parser.path()?);
    }
    parser.finish()?;
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placeholders() -> Placeholders {
        let names = [("#a", "rf"), ("#b", "b_rpm.v2_tk"), ("#c", "cascade")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let values = [(":one", "1"), (":two", "2")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), AttributeValue::N(v.to_owned())))
            .collect();
        Placeholders::new(names, values)
    }

    fn key(name: &str) -> Path {
        vec![Step::Key(name.to_owned())]
    }

    fn n(v: &str) -> Operand {
        Operand::Value(AttributeValue::N(v.to_owned()))
    }

    #[test]
    fn an_update_has_every_clause_with_placeholders_resolved() {
        let mut p = placeholders();
        let text = "SET #a = if_not_exists(#a, :one) + :two, x.y[3] = :one REMOVE #c ADD #b :one";
        let u = update(text, &mut p).unwrap();
        assert_eq!(
            u.set[0],
            (
                key("rf"),
                Operand::Plus(
                    Box::new(Operand::IfNotExists(key("rf"), Box::new(n("1")))),
                    Box::new(n("2"))
                )
            )
        );
        assert_eq!(
            u.set[1].0,
            vec![Step::Key("x".into()), Step::Key("y".into()), Step::Index(3)]
        );
        assert_eq!(u.remove, [key("cascade")]);
        assert_eq!(u.add, [(key("b_rpm.v2_tk"), AttributeValue::N("1".into()))]);
        p.check_all_used().unwrap();
    }

    /// As DynamoDB Local 3.3.0 answers: 299 operators pass, 301 do not; 150 functions
    /// joined by 149 `AND`s pass, one more does not; a condition over 4096 bytes does not.
    #[test]
    fn conditions_over_dynamodb_s_limits_are_refused_as_it_refuses_them() {
        let ors = |k: usize| vec!["#a = :one"; k].join(" OR ");
        let bounded =
            |text: &str| bounded_condition("ConditionExpression", text, &mut placeholders());
        assert!(bounded(&ors(150)).is_ok());
        let e = bounded(&ors(151)).unwrap_err();
        assert_eq!(e.code, "ValidationException");
        assert_eq!(
            e.message,
            "Invalid ConditionExpression: The expression contains too many operators; operator \
             count: 301"
        );
        let exists = |k: usize| vec!["attribute_exists(#a)"; k].join(" AND ");
        assert!(bounded(&exists(150)).is_ok());
        assert!(bounded(&exists(151)).is_err());
        let long = format!("#a = :one OR #b = :one{}", " ".repeat(4080));
        assert!(long.len() > MAX_EXPRESSION_BYTES);
        let e = bounded(&long).unwrap_err();
        assert!(
            e.message
                .starts_with("Invalid ConditionExpression: Expression size has exceeded"),
            "{}",
            e.message
        );
        let e = update(
            &format!("SET #a = :one{}", " ".repeat(4090)),
            &mut placeholders(),
        )
        .unwrap_err();
        assert!(
            e.message
                .starts_with("Invalid UpdateExpression: Expression size")
        );
    }

    /// A chain of 299 operators is as deep as it is long; its readers walk it without
    /// recursing, so a small stack holds them.
    #[test]
    fn a_long_chain_is_read_without_deep_recursion() {
        let small_stack = std::thread::Builder::new().stack_size(64 * 1024);
        let read = small_stack
            .spawn(|| {
                let text = vec!["#a = :two"; 149]
                    .into_iter()
                    .chain(["#a = :one"])
                    .collect::<Vec<_>>()
                    .join(" OR ");
                let cond = condition(&text, &mut placeholders()).expect("parsed");
                let item = [("rf".to_owned(), AttributeValue::N("1".into()))].into();
                let holds = super::super::eval::holds(&item, &cond).expect("evaluated");
                (cond.operators(), cond.chain().len(), holds)
            })
            .expect("thread")
            .join()
            .expect("no stack overflow");
        assert_eq!(read, (299, 150, true));
    }

    #[test]
    fn conditions_bind_not_before_and_before_or() {
        let mut p = placeholders();
        let c = condition(
            "attribute_not_exists(#a) OR NOT #a = :one AND #b BETWEEN :one AND :two",
            &mut p,
        )
        .unwrap();
        let Cond::Or(left, right) = c else {
            panic!("OR at the top: {c:?}")
        };
        assert_eq!(*left, Cond::NotExists(key("rf")));
        let Cond::And(not, between) = *right else {
            panic!("AND under OR")
        };
        assert!(matches!(*not, Cond::Not(_)));
        assert!(matches!(*between, Cond::Between(..)));
    }

    #[test]
    fn functions_comparators_and_lists_parse() {
        let mut p = placeholders();
        for text in [
            "(#a <> :one) AND (#a <= :two) AND (#a >= :one) AND (#a < :two) AND (#a > :one)",
            "#a IN (:one, :two)",
            "size(#b) > :one AND contains(#c, :two) AND begins_with(#c, :one)",
            "attribute_type(#a, :one) and attribute_exists(#c)",
        ] {
            condition(text, &mut p).unwrap_or_else(|e| panic!("{text}: {e:?}"));
        }
    }

    #[test]
    fn malformed_and_misplaced_expressions_are_refused() {
        let refused = |text: &str, update_expression: bool| {
            let mut p = placeholders();
            if update_expression {
                update(text, &mut p).is_err()
            } else {
                condition(text, &mut p).is_err()
            }
        };
        assert!(refused("", false));
        assert!(refused("#a = ", false));
        assert!(refused("#a = :missing", false));
        assert!(refused("#undeclared = :one", false));
        assert!(refused("#a = :one extra", false));
        assert!(refused("#a + :one = :two", false));
        assert!(refused("if_not_exists(#a, :one) = :one", false));
        assert!(refused("unknown_fn(#a)", false));
        assert!(refused("SET #a = size(#b)", true));
        assert!(refused("SET #a = :one SET #b = :two", true));
        assert!(refused("SET #a :one", true));
        assert!(refused("ADD #a #b", true));
        assert!(refused("UPSERT #a = :one", true));
        assert!(refused("#a $ :one", false));
    }

    #[test]
    fn unused_placeholders_are_refused() {
        let mut p = placeholders();
        condition("#a = :one", &mut p).unwrap();
        let err = p.check_all_used().unwrap_err();
        assert!(
            err.message.contains("ExpressionAttributeNames unused"),
            "{err:?}"
        );
        let mut p = placeholders();
        condition("#a = :one AND #b = :one AND #c = :one", &mut p).unwrap();
        let err = p.check_all_used().unwrap_err();
        assert!(err.message.contains(":two"), "{err:?}");
    }

    #[test]
    fn projections_are_lists_of_paths() {
        let mut p = placeholders();
        assert_eq!(
            projection("#a, #b, m.k", &mut p).unwrap(),
            vec![
                key("rf"),
                key("b_rpm.v2_tk"),
                vec![Step::Key("m".into()), Step::Key("k".into())]
            ]
        );
    }
}
