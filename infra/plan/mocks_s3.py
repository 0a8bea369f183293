"""The plan's S3: the bundle bucket and its settings created in moto, with what moto does not check (bucket names,
policy principals, public policies under a public access block) checked by infra/plan/aws_rules.py."""

from __future__ import annotations

import base64
import hashlib
import json

from infra.plan import aws_rules


class S3Mocks:
    """Mixed into MotoMocks: needs its `s3`, `iam`, `region` and the `s3_blocks` dict."""

    def _bucket(self, name, i):
        bucket = i["bucket"]
        aws_rules.check_bucket_name(name, bucket)
        kwargs = (
            {} if self.region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": self.region}}
        )
        self.s3.create_bucket(Bucket=bucket, **kwargs)
        if i.get("tags"):
            self.s3.put_bucket_tagging(
                Bucket=bucket, Tagging={"TagSet": [{"Key": k, "Value": v} for k, v in sorted(i["tags"].items())]}
            )
        return bucket, {
            "arn": f"arn:aws:s3:::{bucket}",
            "bucket": bucket,
            "region": self.region,
            "bucketDomainName": f"{bucket}.s3.amazonaws.com",
        }

    def _bucketPublicAccessBlock(self, name, i):
        config = {
            k: bool(i.get(w))
            for k, w in (
                ("BlockPublicAcls", "blockPublicAcls"),
                ("IgnorePublicAcls", "ignorePublicAcls"),
                ("BlockPublicPolicy", "blockPublicPolicy"),
                ("RestrictPublicBuckets", "restrictPublicBuckets"),
            )
        }
        self.s3.put_public_access_block(Bucket=i["bucket"], PublicAccessBlockConfiguration=config)
        self.s3_blocks[i["bucket"]] = config
        return i["bucket"], {}

    def _bucketServerSideEncryptionConfiguration(self, name, i):
        rules = [
            {
                "ApplyServerSideEncryptionByDefault": {
                    "SSEAlgorithm": r["applyServerSideEncryptionByDefault"]["sseAlgorithm"]
                }
            }
            for r in i["rules"]
        ]
        self.s3.put_bucket_encryption(Bucket=i["bucket"], ServerSideEncryptionConfiguration={"Rules": rules})
        return i["bucket"], {}

    def _bucketVersioning(self, name, i):
        status = i["versioningConfiguration"]["status"]
        self.s3.put_bucket_versioning(Bucket=i["bucket"], VersioningConfiguration={"Status": status})
        return i["bucket"], {}

    def _bucketPolicy(self, name, i):
        policy = json.loads(i["policy"])
        roles = {r["Arn"] for page in self.iam.get_paginator("list_roles").paginate() for r in page["Roles"]}
        blocks = self.s3_blocks.get(i["bucket"], {}).get("BlockPublicPolicy", False)
        aws_rules.check_bucket_policy(name, policy, roles, blocks)
        # moto evaluates no principal condition: a Deny to "*" but the cluster's roles (the state bucket's) would
        # lock every caller of the embedded AWS out, so moto holds the policy without it (the pack checks it).
        kept = [st for st in policy.get("Statement", []) if not (st.get("Effect") == "Deny" and st.get("Condition"))]
        self.s3.put_bucket_policy(Bucket=i["bucket"], Policy=json.dumps({**policy, "Statement": kept}))
        return i["bucket"], {}

    def _bucketObjectv2(self, name, i):
        body = (
            base64.b64decode(i["contentBase64"], validate=True)
            if i.get("contentBase64")
            else i.get("content", "").encode()
        )
        out = self.s3.put_object(
            Bucket=i["bucket"],
            Key=i["key"],
            Body=body,
            IfNoneMatch="*",
            ContentType=i.get("contentType") or "binary/octet-stream",
        )
        etag = hashlib.md5(body).hexdigest()  # noqa: S324 - S3's ETag of a single-part object
        return f"{i['bucket']}/{i['key']}", {
            "etag": etag,
            "versionId": out.get("VersionId", ""),
            "arn": f"arn:aws:s3:::{i['bucket']}/{i['key']}",
        }
