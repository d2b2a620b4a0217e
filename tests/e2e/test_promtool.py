"""promtool on what we ship: the rule file checks clean, its unit tests (alerts_test.yaml:
every alert firing where it should, silent where it should not) pass, and the metrics
page passes promtool's exposition lint."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp

from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.testing import eventually

from .conftest import RULES, Stack

ALERT_TESTS = Path(__file__).with_name("alerts_test.yaml")


async def promtool(binary: str, *args: str, stdin: bytes | None = None) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        binary,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate(stdin)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_rule_file_checks_clean(promtool_binary: str) -> None:
    code, out = await promtool(promtool_binary, "check", "rules", str(RULES))
    assert code == 0, out
    assert "SUCCESS: 7 rules found" in out


async def test_alert_unit_tests_pass(promtool_binary: str) -> None:
    code, out = await promtool(promtool_binary, "test", "rules", str(ALERT_TESTS))
    assert code == 0, out
    assert "SUCCESS" in out


async def test_a_broken_expectation_fails(promtool_binary: str, tmp_path: Path) -> None:
    # The unit tests can fail: the same file with one expected alert taken away does.
    broken = tmp_path / "alerts_test.yaml"
    text = ALERT_TESTS.read_text().replace(
        "../../manifests/prometheus/rules/trainjob-status.rules.yaml", str(RULES)
    )
    marker = "              trainjob: silent\n"
    assert text.count(marker) == 1
    broken.write_text(text.replace(marker, "              trainjob: someone-else\n"))
    code, out = await promtool(promtool_binary, "test", "rules", str(broken))
    assert code == 1
    assert 'trainjob="silent"' in out


async def test_the_metrics_page_passes_promtool_lint(
    promtool_binary: str, stack: Stack, devcluster: DevCluster
) -> None:
    devcluster.create_trainjob("team-a", "tj")
    update = {
        "progressPercentage": 10,
        "estimatedRemainingSeconds": 5,
        "metrics": [{"name": "loss", "value": "1"}, {"name": 'a "quoted"\nname', "value": "2"}],
        "lastUpdatedTime": "2026-12-02T18:33:25Z",
    }
    await stack.post("team-a", "tj", update)

    async def exported() -> bool:
        return stack.exporter.series_count == 6  # 5 and the info

    await eventually(exported, what="the posted status in the exporter")
    async with aiohttp.ClientSession() as session, session.get(stack.metrics_url) as response:
        page = await response.read()
    assert b'trainjob_metric{name="a \\"quoted\\"\\nname"' in page
    code, out = await promtool(promtool_binary, "check", "metrics", stdin=page)
    assert (code, out) == (0, "")
