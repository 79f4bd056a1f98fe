"""A StreamApp on the broker's SASL_SSL listener with bad or missing credentials fails at once
with an error that says why, instead of hanging in timeouts. (Word count, restore and failover
over SASL_SSL are the `sasl_ssl` cases of test_wordcount.py, test_restore.py, test_failover.py.)"""

from __future__ import annotations

import subprocess
import time

import pytest

from eddy_runtime.driver.outcomes import DriverError
from tests.runtime.apps import driver_for, streamapp

pytestmark = pytest.mark.integration


def secured_app(kafka, name: str):
    source = kafka.create_topic(f"{name}-lines", partitions=2)
    return streamapp(name, kafka.secure_bootstrap, "examples.wordcount.app",
                     {"input_topic": source, "output_topic": f"{name}-counts"}, kafka=kafka.security_spec())


def test_a_wrong_password_fails_the_app_at_once_naming_the_refusal(kafka, spark, tmp_path, monkeypatch):
    monkeypatch.setenv("EDDY_KAFKA_SASL_PASSWORD", "not-" + kafka.credentials.password)
    driver = driver_for(spark, secured_app(kafka, kafka.unique_name("badpw")), str(tmp_path / "state"))
    started = time.monotonic()
    with pytest.raises(DriverError) as e:
        driver.prepare()
    took = time.monotonic() - started
    message = str(e.value)
    assert "login or TLS handshake failed" in message and "invalid credentials" in message, message
    assert "SCRAM-SHA-512" in message, message
    assert kafka.secure_bootstrap in message
    assert kafka.credentials.password not in message
    assert took < 15, f"a refused login took {took:.1f} s to surface"


def test_missing_credentials_are_named(kafka, spark, tmp_path, monkeypatch):
    monkeypatch.delenv("EDDY_KAFKA_SASL_PASSWORD")
    driver = driver_for(spark, secured_app(kafka, kafka.unique_name("nopw")), str(tmp_path / "state"))
    with pytest.raises(DriverError, match="EDDY_KAFKA_SASL_PASSWORD"):
        driver.prepare()


def test_the_right_credentials_pass_the_check(kafka, spark, tmp_path):
    driver = driver_for(spark, secured_app(kafka, kafka.unique_name("goodpw")), str(tmp_path / "state"))
    compiled = driver.prepare()
    assert compiled.subtopologies


def test_a_ca_that_did_not_sign_the_broker_fails_the_app_at_once(kafka, spark, tmp_path, monkeypatch):
    other_ca = tmp_path / "other-ca.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=other",
                    "-keyout", str(tmp_path / "other-ca.key"), "-out", str(other_ca)],
                   check=True, capture_output=True, timeout=60)
    monkeypatch.setenv("EDDY_KAFKA_SSL_CA_LOCATION", str(other_ca))
    driver = driver_for(spark, secured_app(kafka, kafka.unique_name("badca")), str(tmp_path / "state"))
    with pytest.raises(DriverError, match="login or TLS handshake failed: .*certificate verify failed"):
        driver.prepare()
