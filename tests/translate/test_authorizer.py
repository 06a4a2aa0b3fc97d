"""translate.authorizer decides as Kafka's StandardAuthorizer does: one test per rule."""

from __future__ import annotations

from translate.authorizer import (
    AclBinding,
    AclSnapshot,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

ALICE = "User:alice"
HOST = "10.0.0.7"
Op = Operation
G, T = ResourceType.GROUP, ResourceType.TOPIC


def acl(
    name: str,
    op: Operation = Op.READ,
    perm: Permission = Permission.ALLOW,
    principal: str = ALICE,
    host: str = "*",
    pattern: PatternType = PatternType.LITERAL,
    rtype: ResourceType = G,
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def allowed(acls: list[AclBinding], op: Operation = Op.READ, name: str = "g1", rtype: ResourceType = G,
            principal: str = ALICE, host: str = HOST, **kw: object) -> bool:
    return AclSnapshot.of(acls, **kw).authorize(principal, host, op, rtype, name)  # type: ignore[arg-type]


def test_literal_pattern_matches_only_its_own_name() -> None:
    assert allowed([acl("g1")])
    assert not allowed([acl("g1")], name="g10")
    assert not allowed([acl("g1", rtype=T)], name="g1")  # a topic ACL says nothing about a group of that name


def test_literal_star_is_a_wildcard_for_every_name() -> None:
    assert allowed([acl("*")], name="anything")


def test_prefixed_pattern_matches_names_starting_with_it() -> None:
    rule = acl("orders-", pattern=PatternType.PREFIXED)
    assert allowed([rule], name="orders-eu")
    assert allowed([rule], name="orders-")
    assert not allowed([rule], name="order")
    # A prefixed "*" is a literal prefix, not a wildcard.
    assert not allowed([acl("*", pattern=PatternType.PREFIXED)], name="g1")


def test_deny_wins_over_allow_from_any_pattern() -> None:
    acls = [acl("*"), acl("g", pattern=PatternType.PREFIXED), acl("g1", perm=Permission.DENY)]
    assert not allowed(acls)
    assert allowed(acls, name="g2")


def test_deny_all_denies_every_operation_and_allow_all_allows_every_one() -> None:
    assert not allowed([acl("g1", Op.ALL), acl("g1", Op.ALL, Permission.DENY)], Op.DESCRIBE)
    for op in (Op.READ, Op.DELETE, Op.DESCRIBE, Op.ALTER_CONFIGS):
        assert allowed([acl("g1", Op.ALL)], op)


def test_wildcard_principal_matches_every_user_and_other_principals_do_not() -> None:
    assert allowed([acl("g1", principal="User:*")])
    assert not allowed([acl("g1", principal="User:bob")])
    assert not allowed([acl("g1", principal="User:ALICE")])  # principal names are case-sensitive


def test_host_must_be_the_clients_address_or_star() -> None:
    assert allowed([acl("g1", host=HOST)])
    assert not allowed([acl("g1", host="10.0.0.8")])
    # A DENY for another host does not touch this one.
    assert allowed([acl("g1", perm=Permission.DENY, host="10.0.0.8"), acl("g1")])


def test_describe_is_implied_by_read_write_delete_alter_only_when_allowed() -> None:
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert allowed([acl("g1", op)], Op.DESCRIBE), op
    for op in (Op.CREATE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS, Op.IDEMPOTENT_WRITE):
        assert not allowed([acl("g1", op)], Op.DESCRIBE), op
    # A DENY READ does not deny DESCRIBE; a DENY DESCRIBE does not deny READ.
    assert allowed([acl("g1", Op.ALL), acl("g1", Op.READ, Permission.DENY)], Op.DESCRIBE)
    assert allowed([acl("g1", Op.READ), acl("g1", Op.DESCRIBE, Permission.DENY)], Op.READ)
    # Implication goes one way: DESCRIBE does not allow READ.
    assert not allowed([acl("g1", Op.DESCRIBE)], Op.READ)


def test_describe_configs_is_implied_by_alter_configs() -> None:
    assert allowed([acl("g1", Op.ALTER_CONFIGS)], Op.DESCRIBE_CONFIGS)
    assert not allowed([acl("g1", Op.DESCRIBE_CONFIGS)], Op.ALTER_CONFIGS)
    assert not allowed([acl("g1", Op.ALTER)], Op.DESCRIBE_CONFIGS)


def test_super_users_may_do_everything_even_against_a_deny() -> None:
    acls = [acl("g1", Op.ALL, Permission.DENY, principal="User:*")]
    assert allowed(acls, Op.DELETE, principal="User:admin", super_users={"User:admin"})
    assert not allowed(acls, Op.DELETE, principal="User:admin")


def test_allow_everyone_if_no_acl_found_only_when_no_acl_is_bound_to_the_resource() -> None:
    assert allowed([], allow_everyone_if_no_acl_found=True)
    assert not allowed([])
    # An ACL on the resource for someone else (or another operation) means "ACLs found": no default.
    assert not allowed([acl("g1", principal="User:bob")], allow_everyone_if_no_acl_found=True)
    assert not allowed([acl("g1", Op.DELETE)], Op.READ, allow_everyone_if_no_acl_found=True)
    # ACLs on other resources do not count.
    assert allowed([acl("other", principal="User:bob")], allow_everyone_if_no_acl_found=True)


def test_group_authorized_operations_bit_field() -> None:
    snap = AclSnapshot.of([acl("g1", Op.READ), acl("g1", Op.ALTER_CONFIGS)])
    bits = snap.group_authorized_operations(ALICE, HOST, "g1")
    expected = {Op.READ, Op.DESCRIBE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}
    assert bits == sum(1 << int(op) for op in expected)
    assert snap.group_authorized_operations("User:bob", HOST, "g1") == 0
    everything = AclSnapshot.of([], super_users={ALICE}).group_authorized_operations(ALICE, HOST, "g1")
    assert everything == sum(1 << int(op) for op in (Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS))
