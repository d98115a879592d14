"""Routes the events dynalimit publishes on a moto server's EventBridge bus to an SQS queue,
and reads them back: what the alert tests observe of a publication.

    eventbridge_sink.py ENDPOINT create BUS   create the bus (unless "default"), a queue and
                                              a rule sending source "dynalimit" to it; prints
                                              the queue's URL
    eventbridge_sink.py ENDPOINT drain URL    prints every event the queue holds, as one JSON
                                              array, and deletes them
"""

import json
import sys

import boto3


def main() -> None:
    endpoint, command, arg = sys.argv[1], sys.argv[2], sys.argv[3]
    session = boto3.session.Session(
        aws_access_key_id="dynalimit",
        aws_secret_access_key="local",
        region_name="us-east-1",
    )
    sqs = session.client("sqs", endpoint_url=endpoint)
    events = session.client("events", endpoint_url=endpoint)
    if command == "create":
        if arg != "default":
            events.create_event_bus(Name=arg)
        url = sqs.create_queue(QueueName=f"alerts-{arg}")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        events.put_rule(
            Name="dynalimit-alerts",
            EventBusName=arg,
            EventPattern=json.dumps({"source": ["dynalimit"]}),
        )
        events.put_targets(
            Rule="dynalimit-alerts",
            EventBusName=arg,
            Targets=[{"Id": "queue", "Arn": arn}],
        )
        print(url)
    elif command == "drain":
        out = []
        while True:
            got = sqs.receive_message(QueueUrl=arg, MaxNumberOfMessages=10)
            messages = got.get("Messages", [])
            if not messages:
                break
            for m in messages:
                out.append(json.loads(m["Body"]))
                sqs.delete_message(QueueUrl=arg, ReceiptHandle=m["ReceiptHandle"])
        print(json.dumps(out))
    else:
        sys.exit(f"unknown command {command!r}")


if __name__ == "__main__":
    main()
