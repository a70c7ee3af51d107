"""The pure helpers of the benchmarks: percentiles, SSE parsing, wrk's result line."""

import pytest

from bench.common import SseEvent, SseParser, parse_wrk_output, percentile
from bench.p3_api import post_lua


def test_percentile_interpolates_between_closest_ranks() -> None:
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 4.0
    assert percentile(values, 50) == pytest.approx(2.5)
    assert percentile(list(range(1, 101)), 95) == pytest.approx(95.05)
    assert percentile([7.0], 99) == 7.0


def test_percentile_refuses_nothing_and_bad_q() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def feed_all(lines: list[str]) -> list[SseEvent]:
    parser = SseParser()
    return [event for line in lines if (event := parser.feed(line)) is not None]


def test_sse_parser_builds_events_at_blank_lines() -> None:
    lines = [
        ": ping",
        "id: 3",
        "event: metric",
        'data: {"name": "loss",',
        'data: "value": 1}',
        "",
        "",
        "data:no space",
        "",
    ]
    assert feed_all(lines) == [
        SseEvent("metric", '{"name": "loss",\n"value": 1}', "3"),
        SseEvent("message", "no space", "3"),
    ]


def test_sse_parser_ignores_an_event_without_data() -> None:
    assert feed_all(["event: state", "", "event: log", "data: x", ""]) == [
        SseEvent("log", "x", None)
    ]


def test_parse_wrk_output_reads_the_result_line() -> None:
    output = (
        "Running 10s test @ http://127.0.0.1:1/v1/health\n"
        'WRK_RESULT {"requests": 20000, "duration_us": 10000000, "p50_us": 1500, '
        '"p99_us": 42000, "errors": 3, "timeouts": 1}\n'
    )
    result = parse_wrk_output(output)
    assert result.rps == 2000
    assert (result.p50_ms, result.p99_ms) == (1.5, 42.0)
    assert result.failed


def test_parse_wrk_output_without_the_line_fails() -> None:
    with pytest.raises(RuntimeError, match="WRK_RESULT"):
        parse_wrk_output("wrk: connection refused\n")


def test_post_lua_body_is_the_json_spec() -> None:
    lua = post_lua({"name": 'a "quoted" name'})
    assert 'wrk.method = "POST"' in lua
    assert r'wrk.body = "{\"name\": \"a \\\"quoted\\\" name\"}"' in lua


def test_each_round_rotates_the_order_of_the_ways() -> None:
    from bench.p1_p2_training import rotated

    ways = ["bare", "launchbay", "ray"]
    orders = [rotated(ways, i) for i in range(4)]
    assert orders[0] == ways
    assert orders[1] == ["launchbay", "ray", "bare"]
    assert orders[2] == ["ray", "bare", "launchbay"]
    assert orders[3] == ways
    assert rotated(["bare", "launchbay"], 1) == ["launchbay", "bare"]


def test_the_spread_gives_the_range_and_the_quartiles() -> None:
    from bench.p1_p2_training import spread

    assert spread([1.0, 0.9]) == "0.900–1.000"
    assert spread([0.9, 1.0, 1.1, 1.2, 1.3]).startswith("0.900–1.300, quartiles ")


def test_without_ray_the_peer_rows_say_not_run() -> None:
    from bench.p1_p2_training import NOT_RUN, peer_row

    row = peer_row("P1-ray", "Ray ÷ bare", None, [1.0])
    assert row.measured == NOT_RUN
    assert row.measured.startswith("not run")
    assert row.met is None
