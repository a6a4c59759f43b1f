"""Sizes print one way everywhere, with the megabyte the size budget counts in."""

from edge.core.units import MB, size_text


def test_sizes_print_in_the_budgets_units() -> None:
    assert MB == 2**20
    assert [size_text(n) for n in (0, 1023, 1024, 1536, MB, 5 * MB // 2, 2**30)] == [
        "0 B", "1023 B", "1.0 KB", "1.5 KB", "1.00 MB", "2.50 MB", "1.00 GB"]
    assert size_text(3.55 * 2**50) == "3.55 PB"
    assert size_text(2**60) == "1024.00 PB"  # the largest unit keeps counting
