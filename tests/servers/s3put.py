#!/usr/bin/env python3
"""tests/servers/s3put.py - seed the S3 test server (moto) for tests/servers.c.

  s3put.py init ENDPOINT
      On a moto started with INITIAL_NO_AUTH_ACTION_COUNT=3: the three
      unauthenticated IAM calls make a user, give it every permission and an
      access key, printed as "KEY_ID SECRET". From then on moto checks every
      request's SigV4 signature against that key (a wrong key is refused).
  s3put.py put ENDPOINT BUCKET PREFIX LOCAL_DIR
      Create BUCKET (if missing) and upload every file under LOCAL_DIR as
      PREFIX + its relative path, signed with AWS_ACCESS_KEY_ID /
      AWS_SECRET_ACCESS_KEY from the environment.
  s3put.py get ENDPOINT BUCKET PREFIX LOCAL_DIR
      Download every object under PREFIX into LOCAL_DIR (names relative
      to PREFIX), printing their count.
  s3put.py uploads ENDPOINT BUCKET
      Print the number of multipart uploads in progress (started, neither
      completed nor aborted) in BUCKET.

boto3 comes with moto[server] in the same virtualenv (tools/dev s3venv).
"""
import os
import sys

import boto3
from botocore.config import Config

CFG = Config(retries={"max_attempts": 1}, s3={"addressing_style": "path"})


def client(service, endpoint, key="testing", secret="testing"):
    return boto3.client(service, endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id=key, aws_secret_access_key=secret, config=CFG)


def init(endpoint):
    iam = client("iam", endpoint)
    iam.create_user(UserName="sluice")
    iam.put_user_policy(UserName="sluice", PolicyName="all", PolicyDocument=(
        '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}'))
    k = iam.create_access_key(UserName="sluice")["AccessKey"]
    print(k["AccessKeyId"], k["SecretAccessKey"])


def put(endpoint, bucket, prefix, local):
    s3 = client("s3", endpoint, os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"])
    try:
        s3.create_bucket(Bucket=bucket)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    n = 0
    for root, dirs, files in os.walk(local):
        dirs.sort()
        for f in sorted(files):
            p = os.path.join(root, f)
            rel = os.path.relpath(p, local).replace(os.sep, "/")
            with open(p, "rb") as fh:
                s3.put_object(Bucket=bucket, Key=prefix + rel, Body=fh.read())
            n += 1
    print(n)


def get(endpoint, bucket, prefix, local):
    s3 = client("s3", endpoint, os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"])
    n = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for o in page.get("Contents", []):
            p = os.path.join(local, o["Key"][len(prefix):])
            os.makedirs(os.path.dirname(p) or ".", exist_ok=True)
            s3.download_file(bucket, o["Key"], p)
            n += 1
    print(n)


def uploads(endpoint, bucket):
    s3 = client("s3", endpoint, os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"])
    print(len(s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])))


def main(argv):
    if len(argv) == 3 and argv[1] == "init":
        init(argv[2])
    elif len(argv) == 6 and argv[1] == "put":
        put(argv[2], argv[3], argv[4], argv[5])
    elif len(argv) == 6 and argv[1] == "get":
        get(argv[2], argv[3], argv[4], argv[5])
    elif len(argv) == 4 and argv[1] == "uploads":
        uploads(argv[2], argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
