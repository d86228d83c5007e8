"""The batch driver's output is split back into one outcome per pulsar-admin command."""

from __future__ import annotations

from harness.pulsar_tools import _split_batch_output


def test_each_command_gets_its_own_output_and_exit_code() -> None:
    stdout = "\n".join(
        [
            "SLF4J(W): noise before the first command",
            "=== begin 0",
            '[ "a" ]',
            "=== exit 0 0",
            "=== begin 1",
            "no resource at /admin/v2/tenants",
            "Exit code is 1 (System.exit not called, as we are in test mode)",
            "=== exit 1 1",
        ]
    )
    first, second = _split_batch_output(stdout, [["topics", "list"], ["tenants", "list"]])
    assert (first.args, first.exit_code, first.output) == (("topics", "list"), 0, '[ "a" ]')
    assert (second.args, second.exit_code) == (("tenants", "list"), 1)
    assert second.output == "no resource at /admin/v2/tenants"
