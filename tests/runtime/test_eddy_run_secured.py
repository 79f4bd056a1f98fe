"""``eddy run`` against a secured Kafka, the way its README section says: the StreamApp's
``spec.kafka.security`` says SASL_SSL + SCRAM-SHA-512, ``--bootstrap-servers`` names the broker's
SASL_SSL listener, and the credentials are in the environment of the command (which its Spark
``local-cluster`` executor inherits). It feeds the example's sample once; the counts are exact."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
import yaml

from tests.runtime.apps import latest_counts
from tests.servers import REPO

pytestmark = pytest.mark.integration

SAMPLE = REPO / "examples" / "wordcount" / "sample.txt"


def test_eddy_run_counts_the_sample_over_sasl_ssl_with_credentials_from_env(kafka, kafka_credentials, tmp_path):
    app = kafka.unique_name("run")
    body = yaml.safe_load((REPO / "examples" / "wordcount" / "streamapp.yaml").read_text())
    body["spec"].update(applicationId=app, triggerInterval="200ms",
                        kafka=kafka.security_spec())
    body["spec"]["pipeline"]["args"] = {"input_topic": f"{app}-lines", "output_topic": f"{app}-counts"}
    manifest = tmp_path / "streamapp.yaml"
    manifest.write_text(yaml.safe_dump(body))
    (tmp_path / "sample.txt").write_text(SAMPLE.read_text())  # eddy run feeds the sample beside the manifest
    words = Counter(w for line in SAMPLE.read_text().splitlines() for w in re.split(r"[^\w']+", line.lower()) if w)
    log = tmp_path / "eddy-run.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "eddy_runtime.cli", "run", str(manifest), "--bootstrap-servers",
             kafka.secure_bootstrap, "--executors", "1", "--feed-rate", "0"],
            cwd=REPO, stdout=out, stderr=subprocess.STDOUT, text=True, env={**os.environ, **kafka_credentials.env()},
        )
        try:
            deadline = time.monotonic() + 400
            while latest_counts(kafka.bootstrap, f"{app}-counts", idle_s=0.5) != words:
                assert proc.poll() is None, f"eddy run exited {proc.returncode}:\n{log.read_text()[-3000:]}"
                assert time.monotonic() < deadline, f"sample not counted after 400 s:\n{log.read_text()[-3000:]}"
                time.sleep(2)
            proc.send_signal(signal.SIGINT)  # Ctrl-C: finish the batch, checkpoint, stop
            assert proc.wait(120) == 0, log.read_text()[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
    output = log.read_text()
    assert f"Kafka: {kafka.secure_bootstrap} (SASL_SSL/SCRAM-SHA-512)" in output, output[-3000:]
    assert "stopped: stores closed and checkpointed" in output, output[-3000:]
    assert kafka_credentials.password not in output


def test_eddy_run_with_a_wrong_password_says_so(kafka, kafka_credentials, tmp_path):
    body = yaml.safe_load((REPO / "examples" / "wordcount" / "streamapp.yaml").read_text())
    body["spec"]["kafka"] = kafka.security_spec()
    manifest = tmp_path / "streamapp.yaml"
    manifest.write_text(yaml.safe_dump(body))
    env = {**os.environ, **kafka_credentials.env(), "EDDY_KAFKA_SASL_PASSWORD": "wrong"}
    proc = subprocess.run([sys.executable, "-m", "eddy_runtime.cli", "run", str(manifest), "--bootstrap-servers",
                           kafka.secure_bootstrap, "--no-feed"], cwd=REPO, capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "login or TLS handshake failed" in proc.stderr and "invalid credentials" in proc.stderr, proc.stderr[-3000:]
