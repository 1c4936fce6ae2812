"""The secrets check: marked values and credential shapes in log records, and the plugin
that fails a test whose logs hold one."""

from __future__ import annotations

import logging

import pytest

from oracle_core.testing import LogScan, leaks_in, mark_sensitive, sensitive_values

pytest_plugins = ["pytester"]


def record(message: str, *args: object, exc: BaseException | None = None) -> logging.LogRecord:
    exc_info = (type(exc), exc, exc.__traceback__) if exc is not None else None
    return logging.LogRecord("oracle.test", logging.WARNING, __file__, 1, message, args, exc_info)


def test_marked_values_are_found_in_messages_arguments_and_tracebacks() -> None:
    secret = "the user's very private sentence"
    mark_sensitive(secret, "short", 42)
    assert secret in sensitive_values()
    assert "short" not in sensitive_values()  # too short to mean anything when found

    try:
        raise ValueError(f"bad input: {secret}")
    except ValueError as exc:
        failed = exc
    found = leaks_in(
        [
            record("plain text"),
            record("a message: %s", secret),
            record("turn failed", exc=failed),
        ]
    )

    assert [leak.kind for leak in found] == ["marked value", "marked value"]
    assert all(secret not in str(leak) for leak in found)  # reports never repeat it


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Authorization: Bearer abcdefghijklmnopqrstuvwxyz012345", "bearer credential"),
        ("token=mOqJlcm9vdHOB2CpYJQABcRIgAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "UCAN token"),
        ("key MgCY" + "A" * 90, "ucanto private key"),
        ("using sk-abcdefghijklmnopqrstuvwx", "API key"),
        ("token syt_b3JhY2xl_abcdefghijklmnopqrst", "Matrix access token"),
        ("-----BEGIN PRIVATE KEY-----", "PEM private key"),
    ],
)
def test_credential_shapes_are_found_whoever_made_them(text: str, kind: str) -> None:
    assert [leak.kind for leak in leaks_in([record(text)])] == [kind]


@pytest.mark.logs_secrets  # it logs a credential shape for the scan to find
def test_a_scan_keeps_records_until_cleared() -> None:
    scan = LogScan()
    logger = logging.getLogger("oracle.test.scan")
    logger.addHandler(scan)
    try:
        logger.warning("nothing to see")
        logger.warning("Authorization: Bearer abcdefghijklmnopqrstuvwxyz012345")
    finally:
        logger.removeHandler(scan)
    assert len(scan.records) == 2
    assert [leak.kind for leak in scan.leaks()] == ["bearer credential"]
    scan.clear()
    assert scan.leaks() == []


def test_the_plugin_fails_a_test_that_logs_a_secret(pytester: pytest.Pytester) -> None:
    pytester.makeconftest('pytest_plugins = ["oracle_core.testing.pytest_plugin"]')
    pytester.makepyfile(
        """
        import logging

        import pytest

        from oracle_core.testing import mark_sensitive


        def test_quiet():
            logging.getLogger("oracle.x").info("a turn ran")


        def test_leaks_a_message():
            mark_sensitive("what the user typed, word for word")
            logging.getLogger("oracle.x").info("got what the user typed, word for word")


        def test_leaks_at_info_only():
            logging.getLogger("httpx").info("Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123")


        @pytest.mark.logs_secrets
        def test_allowed_to():
            logging.getLogger("oracle.x").info("Bearer abcdefghijklmnopqrstuvwxyz0123456")
        """
    )
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "-o",
        "markers=logs_secrets: allowed",
        "-o",
        "asyncio_default_fixture_loop_scope=function",
        "--strict-markers",
    )
    # The two leaking tests pass their call and fail at teardown, where the check runs.
    result.assert_outcomes(passed=4, errors=2)
    result.stdout.fnmatch_lines(
        [
            "secrets.logged: the logs of this test hold",
            "  marked value in a record of logger 'oracle.x': what t… (34 characters)",
        ]
    )
