from gateway.state.store import java_string_hash, shard_of


def test_java_string_hash_matches_java():
    # Values of String.hashCode() as the JVM computes them.
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    # The one string famous for hashing to Integer.MIN_VALUE.
    assert java_string_hash("polygenelubricants") == -(1 << 31)
    # A character outside the BMP hashes as its two UTF-16 code units.
    assert java_string_hash("\U0001F600") == 31 * 0xD83D + 0xDE00


def test_shard_of_follows_kafka_placement():
    assert shard_of("polygenelubricants", 50) == 0  # abs(Integer.MIN_VALUE) taken as 0
    assert shard_of("hello", 50) == 99162322 % 50
    assert all(0 <= shard_of(f"g{i}", 7) < 7 for i in range(200))
