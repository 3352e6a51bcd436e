"""Restrict SSH to the cluster to one address range: run on the AWS head node by `ray up`.

Ray's AWS launcher creates the cluster's security group with SSH (port 22) open to 0.0.0.0/0,
whatever the cluster file says (its own rules are added beside that one, not instead of it).
ray_cluster.yaml runs this script as a head setup command, over the SSH session `ray up` opened:

    HLGT_SSH_CIDR=203.0.113.0/24 python3 ~/hlgt/cluster/restrict_ssh.py

It finds the head's security groups (instance metadata, then EC2), removes every rule that opens
port 22 to the whole internet (0.0.0.0/0, ::/0) and allows port 22 from HLGT_SSH_CIDR, or, when
that is empty, from the one address this `ray up` connects from (the session's SSH_CLIENT, as /32
or /128). Traffic between the cluster's nodes is a separate rule (group to group) and stays.
The head's instance profile (Ray's default, with EC2 access) allows the calls.
"""
from __future__ import annotations

import argparse
import ipaddress
import json
import os
import sys
import urllib.request

# boto3 is imported where EC2 is called: the package does not depend on it (the AWS head node has
# it), and the tests import the pure functions without it.

WORLD = ("0.0.0.0/0", "::/0")
METADATA = "http://169.254.169.254/latest"


def parse_cidr(text: str) -> str:
    """A CIDR as EC2 writes it (a bare address becomes /32 or /128); the whole internet is refused."""
    try:
        net = ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        raise ValueError(f"HLGT_SSH_CIDR={text!r} is not an address range such as 203.0.113.0/24") from None
    if net.prefixlen == 0:
        raise ValueError(f"{text} opens SSH to the whole internet; give your own address range")
    return str(net)


def default_cidr(environ: dict) -> str:
    """HLGT_SSH_CIDR, else the address of this SSH session's client (SSH_CLIENT="ip port port")."""
    if environ.get("HLGT_SSH_CIDR", "").strip():
        return parse_cidr(environ["HLGT_SSH_CIDR"])
    client = environ.get("SSH_CLIENT", "").split()
    if not client:
        raise ValueError("HLGT_SSH_CIDR is empty and this is not an SSH session: set HLGT_SSH_CIDR")
    return parse_cidr(client[0])


def covers_ssh(rule: dict) -> bool:
    if rule.get("IpProtocol") == "-1":
        return True
    return rule.get("IpProtocol") in ("tcp", "6") and rule.get("FromPort", 0) <= 22 <= rule.get("ToPort", 65535)


def changes(permissions: list[dict], cidr: str) -> tuple[list[dict], list[dict]]:
    """(rules to revoke, rules to authorize) for one security group's IpPermissions: every range of
    the whole internet on a rule covering port 22 goes; SSH from ``cidr`` comes, unless there."""
    revoke, present = [], False
    for rule in permissions:
        if not covers_ssh(rule):
            continue
        base = {k: rule[k] for k in ("IpProtocol", "FromPort", "ToPort") if k in rule}
        v4 = [r for r in rule.get("IpRanges", []) if r.get("CidrIp") in WORLD]
        v6 = [r for r in rule.get("Ipv6Ranges", []) if r.get("CidrIpv6") in WORLD]
        if v4 or v6:
            revoke.append({**base, **({"IpRanges": [{"CidrIp": r["CidrIp"]} for r in v4]} if v4 else {}),
                           **({"Ipv6Ranges": [{"CidrIpv6": r["CidrIpv6"]} for r in v6]} if v6 else {})})
        ranges = ([r.get("CidrIp") for r in rule.get("IpRanges", [])]
                  + [r.get("CidrIpv6") for r in rule.get("Ipv6Ranges", [])])
        present |= cidr in ranges
    key = "Ipv6Ranges" if ":" in cidr else "IpRanges"
    field = "CidrIpv6" if ":" in cidr else "CidrIp"
    authorize = [] if present else [{"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22,
                                     key: [{field: cidr, "Description": "SSH (cluster/restrict_ssh.py)"}]}]
    return revoke, authorize


def _metadata(path: str, token: str) -> str:
    request = urllib.request.Request(f"{METADATA}/{path}", headers={"X-aws-ec2-metadata-token": token})
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.read().decode()


def head_groups() -> tuple[str, list[str]]:
    """The region and security group ids of the instance this runs on (IMDSv2)."""
    request = urllib.request.Request(f"{METADATA}/api/token", method="PUT",
                                     headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
    with urllib.request.urlopen(request, timeout=5) as response:
        token = response.read().decode()
    document = json.loads(_metadata("dynamic/instance-identity/document", token))
    import boto3

    ec2 = boto3.client("ec2", region_name=document["region"])
    reservations = ec2.describe_instances(InstanceIds=[document["instanceId"]])["Reservations"]
    groups = [g["GroupId"] for g in reservations[0]["Instances"][0]["SecurityGroups"]]
    return document["region"], groups


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.parse_args(argv)
    cidr = default_cidr(dict(os.environ))
    import boto3

    region, group_ids = head_groups()
    ec2 = boto3.client("ec2", region_name=region)
    for group in ec2.describe_security_groups(GroupIds=group_ids)["SecurityGroups"]:
        revoke, authorize = changes(group["IpPermissions"], cidr)
        if authorize:
            ec2.authorize_security_group_ingress(GroupId=group["GroupId"], IpPermissions=authorize)
        if revoke:
            ec2.revoke_security_group_ingress(GroupId=group["GroupId"], IpPermissions=revoke)
        print(f"{group['GroupId']}: SSH from {cidr}; {len(revoke)} rule(s) open to the internet removed")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ValueError as e:
        print(f"cluster/restrict_ssh.py: error: {e}", file=sys.stderr)
        sys.exit(2)
