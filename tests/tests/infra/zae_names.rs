//! dynalimit's template against zae-limiter 0.17's own (read from the installed package of
//! `DYNALIMIT_PYTHON`): the names roles, policies and tooling carry from one stack to the other
//! are the same, and the Lambda function names differ, so that zae-limiter's auto-update finds
//! no function of its own on a dynalimit stack.

use std::collections::BTreeSet;
use std::process::Command;

use dynalimit_tests::template::{resources_of_type, template};
use serde_json::{Value, json};

/// Every `${aws:PrincipalTag/…}` variable the template's managed policies use.
fn principal_tags(t: &Value) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (_, policy) in resources_of_type(t, "AWS::IAM::ManagedPolicy") {
        let text = policy["Properties"]["PolicyDocument"].to_string();
        for part in text.split("${aws:PrincipalTag/").skip(1) {
            found.insert(part.split('}').next().expect("closing brace").to_owned());
        }
    }
    found
}

/// The tags of resource `id`, as key → value.
fn tags(t: &Value, id: &str) -> Vec<(String, String)> {
    t["Resources"][id]["Properties"]["Tags"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|tag| {
            (
                tag["Key"].as_str().expect("key").to_owned(),
                tag["Value"].as_str().expect("value").to_owned(),
            )
        })
        .collect()
}

/// The logical id an output's value refers to (`!Ref X`, `!GetAtt X.Attr`), and how.
fn referent(output: &Value) -> Option<(String, String)> {
    let value = &output["Value"];
    if let Some(id) = value["Ref"].as_str() {
        return Some((id.to_owned(), "Ref".to_owned()));
    }
    let parts = value["Fn::GetAtt"].as_array()?;
    Some((
        parts[0].as_str()?.to_owned(),
        format!("GetAtt {}", parts[1].as_str()?),
    ))
}

#[test]
fn roles_policies_tags_and_outputs_carry_zae_limiters_names_and_functions_do_not() {
    let Some(python) = dynalimit_tests::zae::interpreter() else {
        return;
    };
    let Some(theirs) = dynalimit_tests::zae::template() else {
        return;
    };
    let ours = template();

    // One principal tag names a namespace in both: a tagged role works on either stack.
    assert_eq!(principal_tags(&ours), principal_tags(&theirs));
    assert_eq!(
        principal_tags(&ours),
        BTreeSet::from(["zael_namespace_id".to_owned()])
    );

    // The six managed policies, under the same logical ids (and so the same outputs).
    let policies = |t: &Value| -> BTreeSet<String> {
        resources_of_type(t, "AWS::IAM::ManagedPolicy")
            .into_iter()
            .map(|(id, _)| id.clone())
            .collect()
    };
    assert!(
        policies(&theirs).is_subset(&policies(&ours)),
        "{:?} missing",
        policies(&theirs).difference(&policies(&ours))
    );

    // The roles both stacks create carry zae-limiter's tags; `Application` names the tool,
    // which `dynalimit delete` reads as its mark.
    for (id, _) in resources_of_type(&theirs, "AWS::IAM::Role") {
        if ours["Resources"].get(id).is_none() {
            continue;
        }
        let mine = tags(&ours, id);
        for (key, value) in tags(&theirs, id) {
            let own = mine
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.as_str());
            match key.as_str() {
                "Application" => assert_eq!(own, Some("dynalimit"), "{id}"),
                _ => assert_eq!(own, Some(value.as_str()), "{id} {key}"),
            }
        }
    }
    assert_eq!(
        tags(&ours, "AppRole"),
        [
            ("Application".to_owned(), "dynalimit".to_owned()),
            ("Role".to_owned(), "app".to_owned())
        ]
    );

    // Every output zae-limiter's template has for a resource both stacks have, with its name.
    for (name, output) in theirs["Outputs"].as_object().expect("outputs") {
        let Some((id, how)) = referent(output) else {
            continue;
        };
        if ours["Resources"].get(&id).is_none() {
            continue;
        }
        // zae-limiter keeps its code in the audit archive's bucket; ours has a bucket of its
        // own, deleted with the stack, while the archive is kept.
        if name == "CodeBucketName" {
            assert_eq!(
                ours["Outputs"][name]["Value"],
                json!({ "Ref": "CodeBucket" })
            );
            continue;
        }
        assert_eq!(
            referent(&ours["Outputs"][name]),
            Some((id.clone(), how)),
            "output {name} of {id}"
        );
        assert_eq!(
            ours["Outputs"][name]["Condition"], ours["Resources"][&id]["Condition"],
            "output {name} exists exactly when {id} does"
        );
    }

    // No function of ours has a name zae-limiter computes: its auto-update pushes Python
    // code to `{stack}-aggregator` and `{stack}-limits-provisioner`.
    let names = |t: &Value| -> Vec<Value> {
        resources_of_type(t, "AWS::Lambda::Function")
            .into_iter()
            .map(|(_, f)| f["Properties"]["FunctionName"].clone())
            .collect()
    };
    let their_names = names(&theirs);
    assert!(
        their_names.contains(&serde_json::json!({"Fn::Sub": "${AWS::StackName}-aggregator"})),
        "{their_names:?}"
    );
    for name in names(&ours) {
        assert!(
            name.is_null() || !their_names.contains(&name),
            "{name} is a name zae-limiter pushes code to"
        );
    }

    // The stack tag naming the managing tool: zae-limiter's key, dynalimit's value.
    let out = Command::new(&python)
        .args([
            "-c",
            "from zae_limiter.infra import stack_manager as m; \
             print(m.MANAGED_BY_TAG_KEY, m.MANAGED_BY_TAG_VALUE)",
        ])
        .output()
        .expect("python");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.split_whitespace().collect::<Vec<_>>(),
        [dynalimit_stack::MANAGED_BY_KEY, "zae-limiter"],
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_ne!(dynalimit_stack::MARK_VALUE, "zae-limiter");
}
