"""The console and Swagger UI in a real headless Chromium (Debian's chromium and chromium-driver, driven by selenium),
against the running service, with every request outside the service blocked. Screenshots are saved under the test's
tmp dir and copied to var/test-artifacts/; downloads land in the test's tmp dir."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from app.core.jobstates import JobStatus
from app.db.base import utcnow
from app.db.session import transaction
from app.services import jobs, models
from bench.chaos import digits_job
from tests.helpers import Service, running_service

pytestmark = pytest.mark.slow
webdriver = pytest.importorskip("selenium.webdriver")
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
ARTIFACTS = Path(__file__).resolve().parents[2] / "var" / "test-artifacts"
HOSTILE = "<script>alert(1)</script>"
ALICE, BOB = "alice-0123456789abcdef", "bobby-0123456789abcdef"
HELD = "held"  # an owner whose task-slot quota (1) keeps a 2-slot job waiting


def _browser(tmp: Path) -> Any:
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.fail("chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)")
    from selenium.webdriver.chrome.service import Service as DriverService

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1280,800",
                 # nothing but the service: names resolve to nothing, and any other address goes to a dead proxy
                 "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                 "--proxy-server=http://127.0.0.1:9",  # loopback addresses bypass a proxy by default
                 f"--user-data-dir={tempfile.mkdtemp(dir=tmp)}"):  # fmt: skip
        options.add_argument(flag)
    options.add_experimental_option("prefs", {"profile.default_content_setting_values.automatic_downloads": 1})
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    return webdriver.Chrome(service=DriverService(str(CHROMEDRIVER)), options=options)


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("browser")


@pytest.fixture(scope="module")
def svc(spark: Any, tmp: Path) -> Iterator[Service]:
    with running_service(spark, tmp / "svc", owner_quotas={HELD: {"task_slots": 1}}) as service:
        yield service


@pytest.fixture(scope="module")
def browser(svc: Service, tmp: Path) -> Iterator[Any]:
    driver = _browser(tmp)
    try:
        yield driver
    finally:
        driver.quit()  # before the service stops: its event streams close with the browser


def _shot(driver: Any, tmp: Path, name: str) -> None:
    path = tmp / f"{name}.png"
    driver.save_screenshot(str(path))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(path, ARTIFACTS / path.name)


def _until(driver: Any, condition: Callable[[Any], Any], what: str, timeout: float = 240) -> Any:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # The jobs page refreshes every 2 s: a row found a moment ago may be gone (filtered out), a cell rebuilt.
    wait = WebDriverWait(driver, timeout, poll_frequency=0.25, ignored_exceptions=[StaleElementReferenceException])
    return wait.until(condition, message=what)


def _requested(driver: Any) -> list[str]:
    """Every URL the browser asked for since the last call."""
    import json

    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def _outside_requests(driver: Any, base: str) -> list[str]:
    """Network requests (not the browser's own chrome:// pages) to anything but ``base``."""
    network = [u for u in _requested(driver) if u.startswith(("http:", "https:", "ws:", "wss:"))]
    return [u for u in network if not u.startswith(base)]


def _download(driver: Any, button: Any, directory: Path) -> Path:
    """Click a download button and wait for the one file it saves in ``directory`` (empty before)."""
    directory.mkdir(parents=True, exist_ok=True)
    driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(directory)})
    what = f"{button.text} downloads"
    button.click()
    return Path(_until(driver, lambda d: [p for p in directory.iterdir() if p.suffix != ".crdownload"], what, 120)[0])


_PATHS = {
    JobStatus.SUCCEEDED: (JobStatus.STARTING, JobStatus.RUNNING, JobStatus.SUCCEEDED),
    JobStatus.RUNNING: (JobStatus.STARTING, JobStatus.RUNNING),
    JobStatus.FAILED: (JobStatus.FAILED,),
    JobStatus.CANCELLED: (JobStatus.CANCELLED,),
}


def _fake_job(svc: Service, name: str, status: JobStatus, *, points: Iterable[dict[str, Any]] = (),
              framework: str | None = "torch", request: dict[str, Any] | None = None, job_type: str = "train",
              parent_id: str | None = None, trial: int | None = None, **values: Any) -> str:  # fmt: skip
    """A job written as a runner would have left it (no Spark): ``status`` reached by the usual transitions, its last
    one writing ``values`` (a RUNNING one gets a heartbeat an hour ahead, so no reconciler takes it for lost)."""
    with transaction(svc.runtime.db) as s:
        row, _ = jobs.create_job(session=s, job_type=job_type, request=request or {"name": name}, framework=framework,
                                 name=name, parent_id=parent_id, trial=trial)  # fmt: skip
        job_id = row.id
    now = utcnow()
    ended = {} if status == JobStatus.RUNNING else {"finished_at": now}
    last = {"started_at": now, "heartbeat_at": now + timedelta(hours=1), **ended, **values}
    with transaction(svc.runtime.db) as s:
        source = JobStatus.QUEUED
        for target in _PATHS[status]:
            extra = last if target == status else {}
            assert jobs.transition(session=s, job_id=job_id, sources=[source], target=target, **extra)
            source = target
        jobs.add_metrics(session=s, job_id=job_id, points=list(points))
    return job_id


def _ended(driver: Any) -> None:
    """Wait until the job page has read every event of an ended job (and drawn its charts)."""
    from selenium.webdriver.common.by import By

    _until(driver, lambda d: "ended" in d.find_element(By.ID, "log-state").text, "every event is read", 60)


def _js(driver: Any, script: str, *args: Any) -> Any:
    return driver.execute_script("return " + script, *args)


def _usable(driver: Any) -> None:
    width = driver.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1], f"horizontal scrolling at 1280x800: {width}"


def test_swagger_ui_renders_offline_and_try_it_out_posts_a_training_job(svc: Service, browser: Any, tmp: Path) -> None:
    from selenium.webdriver.common.by import By

    browser.get(svc.url + "/docs")
    _until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "[id$='-train-train']"), "Swagger UI renders")
    block = browser.find_element(By.CSS_SELECTOR, "[id$='-train-train']")
    block.find_element(By.CSS_SELECTOR, ".opblock-summary").click()
    _until(
        browser, lambda d: block.find_elements(By.CSS_SELECTOR, ".try-out__btn"), "the operation opens"
    ).pop().click()
    _until(browser, lambda d: block.find_elements(By.CSS_SELECTOR, ".execute"), "Try it out").pop().click()
    status = _until(
        browser,
        lambda d: [e.text for e in block.find_elements(By.CSS_SELECTOR, ".live-responses-table .response-col_status")],
        "the request is answered",
        timeout=60,
    )
    _shot(browser, tmp, "docs-try-it-out")
    assert "202" in [text.strip() for text in status], status
    assert _outside_requests(browser, svc.url) == []
    queued = svc.client.get("/jobs", params={"limit": 1}).json()["items"][0]
    assert queued["name"] == "digits-cnn"
    svc.client.post(f"/jobs/{queued['id']}/cancel")  # the example is a real job: not needed here
    svc.wait(queued["id"], {"CANCELLED", "SUCCEEDED", "FAILED"})


def test_jobs_page_follows_a_job_to_succeeded_and_the_job_page_charts_each_epoch(
    svc: Service, browser: Any, tmp: Path
) -> None:
    from selenium.webdriver.common.by import By

    browser.get(svc.url + "/ui")
    _until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#jobs tbody tr"), "the jobs list loads")
    browser.execute_script("window.__notReloaded = true")
    # small batches, so that the job runs for a few of the page's 2 s redraws (3 epochs of 64 take about a second)
    job = svc.train(digits_job("console-a", epochs=3, workers=1, batch=8, units=128))
    row = f"#jobs tbody tr[data-id='{job['id']}']"
    _until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, row), "the new job appears", timeout=30)
    # RUNNING as a rule; a machine fast enough to finish between two redraws shows SUCCEEDED straight away
    _until(browser, lambda d: d.find_element(By.CSS_SELECTOR, row).get_attribute("data-status") in ("RUNNING",
                                                                                                 "SUCCEEDED"),
           "running")  # fmt: skip
    driver_id = svc.client.get(f"/jobs/{job['id']}").json()["worker_id"]
    assert driver_id and driver_id.count(":") == 2  # host:pid:boot
    _until(browser, lambda d: d.find_element(By.CSS_SELECTOR, f"{row} td.driver").text == driver_id, "its driver")
    _shot(browser, tmp, "jobs-running")
    _until(browser, lambda d: d.find_element(By.CSS_SELECTOR, row).get_attribute("data-status") == "SUCCEEDED", "done")
    assert browser.execute_script("return window.__notReloaded") is True, "the page was reloaded"
    _usable(browser)
    _shot(browser, tmp, "jobs-succeeded")

    browser.get(svc.url + f"/ui/jobs/{job['id']}")
    curves = _until(
        browser,
        lambda d: d.execute_script(
            "const c = document.getElementById('chart-loss'); return c.data && c.data.map(t => [t.name, t.x.length]);"
        ),
        "the loss chart draws",
        timeout=60,
    )
    assert dict(curves) == {"training loss (mean of the epoch's steps)": 3, "validation loss": 3}
    _until(browser, lambda d: "ended" in d.find_element(By.ID, "log-state").text, "the log follows to the end")
    assert "epoch 3 done" in browser.find_element(By.ID, "log").text
    assert browser.find_element(By.ID, "job-status").text == "SUCCEEDED"
    assert [td.text for td in browser.find_elements(By.CSS_SELECTOR, "#attempts tbody td.driver")] == [driver_id]
    sharing = browser.execute_script("return document.getElementById('chart-tau').data.length")
    assert sharing == 1  # τ of the one worker; absent keys show their empty state instead
    _usable(browser)
    _shot(browser, tmp, "job-page")
    assert _outside_requests(browser, svc.url) == []


def test_compare_overlays_the_metrics_the_jobs_share(svc: Service, browser: Any, tmp: Path) -> None:
    """Two trained jobs and a third that reports fewer metrics (and one of its own) under a request of another shape:
    the charts are the metrics all three share, each job in one colour throughout, and the table's rows come in
    groups whichever job has them."""
    from selenium.webdriver.common.by import By

    first = svc.client.get("/jobs", params={"status": "SUCCEEDED", "limit": 1}).json()["items"][0]
    second = svc.wait(svc.train(digits_job("console-b", epochs=2, workers=1, seed=3))["id"], {"SUCCEEDED", "FAILED"})
    assert second["status"] == "SUCCEEDED", second["error"]
    points = [{"key": k, "step": e, "epoch": e, "value": 1 / e, "worker": None}
              for e in (1, 2) for k in ("loss", "validation_accuracy")]  # fmt: skip
    points += [{"key": "only_here", "step": 1, "value": 1.0}, {"key": "wire_bytes_total", "step": 2, "value": 9.0}]
    third = _fake_job(svc, "console-c", JobStatus.SUCCEEDED, points=points,
                      request={"name": "console-c", "aaa": 1, "training": {"epochs": 2, "zzz": True}})  # fmt: skip
    browser.get(svc.url + "/ui")
    for job_id in (first["id"], second["id"], third):
        box = f"#jobs tbody tr[data-id='{job_id}'] input[type=checkbox]"
        _until(browser, lambda d, box=box: d.find_elements(By.CSS_SELECTOR, box), "the rows load")
        browser.execute_script("document.querySelector(arguments[0]).click()", box)
    browser.find_element(By.ID, "compare-selected").click()
    traces = _until(
        browser,
        lambda d: d.execute_script(
            "const c = document.getElementById('cmp-loss'); return c && c.data && c.data.map(t => t.x.length);"
        ),
        "the loss curves overlay",
        timeout=60,
    )
    assert traces == [3, 2, 2]
    charts = _js(browser, "Array.from(document.querySelectorAll('#compare-charts .chart')).map(c => "
                 "[c.id, c.data.map(t => t.line.color)])")  # fmt: skip
    assert [c[0] for c in charts] == ["cmp-loss", "cmp-validation_accuracy"], charts
    swatches = _js(browser, "Array.from(document.querySelectorAll('#compare-table .swatch')).map(s => s.dataset.color)")
    assert len(set(swatches)) == 3 and all(colors == swatches for _, colors in charts), (charts, swatches)
    note = browser.find_element(By.ID, "compare-note").text
    assert note.startswith("Not drawn, reported by only some of these jobs: ") and "only_here" in note
    assert "wire_bytes_total" not in note  # a total, never overlaid
    names = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "#compare-table tbody th")]
    groups = [0 if n == "status" else 1 if n.startswith("request.") else 2 if n.startswith("result.") else 3
              for n in names]  # fmt: skip
    assert groups == sorted(groups) and names[1] == "request.aaa" and "request.training.zzz" in names, names
    assert [n for n in names if n.startswith("final ")] == sorted(n for n in names if n.startswith("final "))
    assert "request.training.epochs" in names and "final validation_accuracy" in names
    _usable(browser)
    _shot(browser, tmp, "compare")


def test_text_from_requests_renders_as_text(svc: Service, browser: Any, tmp: Path) -> None:
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    with transaction(svc.runtime.db) as s:  # names the API refuses today, written as an older release could have
        job, _ = jobs.create_job(
            session=s, job_type="train", request={"name": HOSTILE}, framework="torch", name=HOSTILE
        )
        jobs.add_log(session=s, job_id=job.id, message='<img src=x onerror="alert(2)">')
        job_id = job.id
    with transaction(svc.runtime.db) as s:
        jobs.transition(session=s, job_id=job_id, sources=[JobStatus.QUEUED], target=JobStatus.FAILED,
                        finished_at=utcnow(), error_reason="INTERNAL", error_message="<b>bold</b>")  # fmt: skip
    browser.get(svc.url + "/ui")
    link = f"#jobs tbody tr[data-id='{job_id}'] a.job-link"
    _until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, link), "the job is listed")
    assert browser.execute_script("return document.querySelector(arguments[0]).textContent", link) == HOSTILE
    browser.get(svc.url + f"/ui/jobs/{job_id}")
    _until(browser, lambda d: "onerror" in d.find_element(By.ID, "log").text, "the log line shows")
    assert browser.find_element(By.ID, "job-name").text == HOSTILE
    assert browser.find_element(By.ID, "error-message").text == "<b>bold</b>"
    assert browser.execute_script("return document.querySelectorAll('main script, main img, main b').length") == 0
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018
    _shot(browser, tmp, "escaped")


def test_a_job_held_back_by_a_quota_says_what_it_waits_for(svc: Service, browser: Any, tmp: Path) -> None:
    from selenium.webdriver.common.by import By

    with transaction(svc.runtime.db) as s:  # as the driver that found the owner's slots full left it
        job, _ = jobs.create_job(session=s, job_type="train", request={}, framework="torch", name="held", owner=HELD,
                                 slots=2)  # fmt: skip
        job.waiting_for = "task_slots"
        job_id = job.id
    words = f"waiting: task-slots quota of owner {HELD} (the job needs 2 slots)"
    browser.get(svc.url + "/ui")
    cell = f"#jobs tbody tr[data-id='{job_id}'] td.driver"
    _until(browser, lambda d: [e.text for e in d.find_elements(By.CSS_SELECTOR, cell)] == [words], "the jobs page", 30)
    browser.get(svc.url + f"/ui/jobs/{job_id}")
    _until(browser, lambda d: d.find_element(By.ID, "job-waiting").text == words, "the job page says it", 30)
    _usable(browser)
    _shot(browser, tmp, "waiting")
    with transaction(svc.runtime.db) as s:
        jobs.transition(session=s, job_id=job_id, sources=[JobStatus.QUEUED], target=JobStatus.CANCELLED,
                        finished_at=utcnow(), waiting_for=None, error_reason="CANCELLED",
                        error_message="a fixture")  # fmt: skip
    _until(browser, lambda d: not d.find_element(By.ID, "job-waiting").is_displayed(), "no longer waiting", 30)


def test_with_api_keys_the_console_asks_for_one_and_shows_only_its_owners_jobs(
    spark: Any, svc: Service, tmp: Path
) -> None:
    from selenium.webdriver.common.by import By

    keys = f"{ALICE}:alice,{BOB}:bob"
    with running_service(spark, tmp / "keyed", api_keys=keys, in_process_consumer=False) as keyed:
        mine = keyed.train(digits_job("alice-job"), headers={"Authorization": f"Bearer {ALICE}"})["id"]
        theirs = keyed.train(digits_job("bob-job"), headers={"Authorization": f"Bearer {BOB}"})["id"]
        driver = _browser(tmp)
        try:
            driver.get(keyed.url + "/ui/models")
            _until(driver, lambda d: d.find_element(By.ID, "key-form").is_displayed(), "the console asks for a key", 30)
            driver.find_element(By.ID, "key-input").send_keys(ALICE)
            driver.find_element(By.CSS_SELECTOR, "#key-form button").click()
            empty = _until(driver, lambda d: d.find_element(By.ID, "models-empty").text, "an empty state", 30)
            assert empty.startswith("No models yet") and "POST /train" in empty
            _until(driver, lambda d: d.find_element(By.ID, "who").text == "alice", "the key's owner in the header", 30)
            driver.execute_script("sessionStorage.clear()")
            driver.get(keyed.url + "/ui")
            _until(driver, lambda d: d.find_element(By.ID, "key-form").is_displayed(), "the console asks for a key", 30)
            _shot(driver, tmp, "key-form")
            driver.find_element(By.ID, "key-input").send_keys("wrong-0123456789abcdef")
            driver.find_element(By.CSS_SELECTOR, "#key-form button").click()
            refused = _until(driver, lambda d: d.find_element(By.ID, "key-error").text, "the key is refused", 30)
            assert refused.startswith("The key was refused")
            assert driver.execute_script("return sessionStorage.getItem('sparktrain.apiKey')") is None
            _requested(driver)
            time.sleep(4.5)  # two of the jobs page's refreshes
            assert [u for u in _requested(driver) if "/jobs" in u] == [], "the page polls while it asks for a key"
            assert driver.find_element(By.ID, "who").text == ""
            driver.find_element(By.ID, "key-input").send_keys(ALICE)
            driver.find_element(By.CSS_SELECTOR, "#key-form button").click()
            _until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, f"tr[data-id='{mine}']"), "alice's job", 30)
            assert not driver.find_elements(By.CSS_SELECTOR, f"tr[data-id='{theirs}']")
            assert driver.execute_script("return sessionStorage.getItem('sparktrain.apiKey')") == ALICE
            driver.get(keyed.url + f"/ui/jobs/{theirs}")  # the key stays for the tab: no form again
            _until(driver, lambda d: "another owner" in d.find_element(By.ID, "content").text, "absent", 30)
            _shot(driver, tmp, "other-owner")
            trained = svc.client.get("/models/console-a/versions/1").json()  # by the jobs page's test
            with transaction(keyed.runtime.db) as s:
                models.register_version(session=s, name="alice-model", framework="torch", owner="alice", job_id=None,
                                        artifact_uri=trained["artifact_uri"], metrics=trained["metrics"],
                                        params=trained["params"])  # fmt: skip
            driver.get(keyed.url + "/ui/models")
            native = "#alice-model tr[data-version='1'] button[data-format='archive']"
            button = _until(driver, lambda d: d.find_elements(By.CSS_SELECTOR, native), "alice's model", 30)[0]
            saved = _download(driver, button, tmp / "keyed-downloads")
            assert saved.name == "alice-model-v1.tar.gz" and saved.read_bytes()[:2] == b"\x1f\x8b"
            assert ALICE not in driver.current_url
            urls = [u for u in _requested(driver) if ALICE in u]
            assert urls == [], "the key travels in headers only"
        finally:
            driver.quit()


def test_the_gradient_sharing_panel_draws_each_worker_and_its_phases(svc: Service, browser: Any, tmp: Path) -> None:
    """The trainer's step metrics by their names (wire_bytes, dense_bytes, tau, sparsity, phase_*_ms), per worker;
    1,080 points, so they come in three events (500 points at most in one)."""
    from selenium.webdriver.common.by import By

    phases = ("phase_data_ms", "phase_compute_ms", "phase_encode_ms", "phase_exchange_ms", "phase_apply_ms")
    with transaction(svc.runtime.db) as s:
        job, _ = jobs.create_job(session=s, job_type="train", request={}, framework="torch", name="sharing")
        job_id = job.id
    with transaction(svc.runtime.db) as s:
        jobs.transition(session=s, job_id=job_id, sources=[JobStatus.QUEUED], target=JobStatus.CANCELLED,
                        finished_at=utcnow(), error_reason="CANCELLED", error_message="a fixture")  # fmt: skip
        points = []
        for step in range(1, 61):
            for worker in (0, 1):
                values = {"tau": 1e-3 / step, "sparsity": 0.01, "wire_bytes": 900.0, "dense_bytes": 40_000.0,
                          **{k: 1.0 + i for i, k in enumerate(phases)}}  # fmt: skip
                points += [
                    {"key": k, "step": step, "epoch": 1, "worker": worker, "value": v} for k, v in values.items()
                ]
        jobs.add_metrics(session=s, job_id=job_id, points=points)
    browser.get(svc.url + f"/ui/jobs/{job_id}")
    read = "return Object.fromEntries(%s.map(id => [id, (document.getElementById(id).data || []).map(t => t.name)]))"
    charts = ["chart-tau", "chart-sparsity", "chart-bytes", "chart-phases"]
    drawn = _until(
        browser, lambda d: (r := d.execute_script(read % charts))["chart-phases"] and r, "the panel draws", 60
    )
    assert len(drawn["chart-tau"]) == 2 and len(drawn["chart-sparsity"]) == 2
    assert sorted(drawn["chart-bytes"]) == [
        "dense · worker 0",
        "dense · worker 1",
        "sent · worker 0",
        "sent · worker 1",
    ]
    assert drawn["chart-phases"] == ["data", "forward/backward", "encode", "exchange", "apply"]
    bars = browser.execute_script("return document.getElementById('chart-phases').data[0].y")
    assert sorted(set(bars)) == ["worker 0", "worker 1"] and len(bars) == 16  # the latest 8 steps of each worker
    _until(browser, lambda d: "ended" in d.find_element(By.ID, "log-state").text, "every event is read", 30)
    tau = browser.execute_script("return document.getElementById('chart-tau').data.map(t => t.x.length)")
    assert tau == [60, 60]  # each point kept once, in whichever event it came
    _usable(browser)
    browser.execute_script("document.getElementById('sharing').scrollIntoView()")
    _shot(browser, tmp, "gradient-sharing")


def test_a_model_exchanged_exactly_says_why_it_has_no_threshold(svc: Service, browser: Any) -> None:
    """A small model's steps are dense all-reduces and record τ 0, which a log axis does not draw: the chart showed
    axes and a legend and no line (walkthrough). It says why instead; the other charts draw as before."""
    from selenium.webdriver.common.by import By

    points = [{"key": k, "step": step, "epoch": 1, "worker": worker, "value": v}
              for step in range(1, 11) for worker in (0, 1)
              for k, v in (("tau", 0.0), ("sparsity", 1.0), ("wire_bytes", 900.0))]  # fmt: skip
    job_id = _fake_job(svc, "exact", JobStatus.CANCELLED, points=points, error_reason="CANCELLED",
                       error_message="a fixture")  # fmt: skip
    browser.get(svc.url + f"/ui/jobs/{job_id}")
    said = _until(browser, lambda d: "exactly" in (t := d.find_element(By.ID, "chart-tau-empty").text) and t,
                  "the τ chart says why", 60)  # fmt: skip
    assert "exchanged exactly at every step" in said and "exact_below_bytes" in said, said
    assert browser.find_element(By.ID, "chart-tau").get_attribute("hidden") is not None
    sent = "return (document.getElementById('chart-sparsity').data || []).length"
    assert _until(browser, lambda d: d.execute_script(sent), "the sparsity chart draws", 30) == 2


CHART = "const c = document.getElementById(arguments[0]); "
TICKS = "Array.from(document.querySelectorAll('#' + arguments[0] + ' .xtick text')).map(e => e.textContent)"
LEGEND = "Array.from(document.querySelectorAll('#' + arguments[0] + ' .legendtext')).map(e => e.textContent)"


def test_each_metric_is_charted_by_what_it_is(svc: Service, browser: Any, tmp: Path) -> None:
    """A torch job of 36 epochs whose two workers report their speed at steps of their own, with the run's totals;
    and an xgboost job whose metrics are per round (no epoch)."""
    from selenium.webdriver.common.by import By

    torch_points = [
        {"key": k, "step": 10 * e, "epoch": e, "value": v, "worker": w}
        for e in range(1, 37)
        for k, v, w in (("loss", 1 / e, 0), ("validation_accuracy", 1 - 1 / e, None))
    ]
    # worker 0 at odd steps, worker 1 at even ones: summing only the points of a step gave 1,000 for 2,000
    torch_points += [
        {"key": "samples_per_s", "step": step, "epoch": 1 + step // 10, "value": 1000.0, "worker": step % 2}
        for step in range(1, 361)
    ]
    torch_points += [{"key": k, "step": 360, "epoch": None, "value": v * (1 + w), "worker": w}
                     for w in (0, 1) for k, v in (("wire_bytes_total", 300_000.0), ("codec_compression", 3.5),
                                                  ("dense_steps", 2.0), ("step_events_dropped", 0.0))]  # fmt: skip
    shapes = _fake_job(svc, "shapes", JobStatus.SUCCEEDED, points=torch_points)
    browser.get(svc.url + f"/ui/jobs/{shapes}")
    _ended(browser)
    assert browser.execute_script(CHART + "return c.data.map(t => t.name)", "chart-validation") == ["accuracy"]
    ticks = _js(browser, TICKS, "chart-validation")
    assert 4 <= len(ticks) <= 11 and ticks[0] == "1" and all(t.isdigit() for t in ticks), ticks
    assert _js(browser, LEGEND, "chart-validation") == ["accuracy"]  # one line, and still its name
    speed = browser.execute_script(CHART + "return c.data[0].y", "chart-speed")
    assert len(speed) == 359 and set(speed) == {2000}, sorted(set(speed))
    assert browser.find_element(By.ID, "chart-other-empty").text.startswith("No other metrics:")
    expected = {
        "codec_compression": "codec_compression 3.5 7",
        "dense_steps": "dense_steps 2 4",
        "step_events_dropped": "step_events_dropped 0 0",
        "wire_bytes_total": "wire_bytes_total 300,000 600,000",
    }
    rows = "#totals tbody tr"  # read again when a last draw replaced the table's rows meanwhile (a stale row)
    totals = lambda d: {r.get_attribute("data-key"): r.text for r in d.find_elements(By.CSS_SELECTOR, rows)}  # noqa: E731
    _until(browser, lambda d: totals(d) == expected, f"the totals {expected}", 30)
    assert browser.find_element(By.ID, "result").text == "No result: this job ended without one."
    _usable(browser)
    _shot(browser, tmp, "charts-torch")

    rounds = [
        {"key": k, "step": r, "epoch": None, "value": v / r, "worker": None}
        for r in range(1, 301)
        for k, v in (("train_rmse", 3.0), ("validation_rmse", 4.0))
    ]
    rounds.append({"key": "validation_mae", "step": 300, "epoch": None, "value": 0.5, "worker": None})
    xgb = _fake_job(svc, "rounds", JobStatus.SUCCEEDED, framework="xgboost", points=rounds)
    browser.get(svc.url + f"/ui/jobs/{xgb}")
    _ended(browser)
    other = browser.execute_script(CHART + "return [c.layout.xaxis.title.text, c.data.map(t => [t.name, t.x.length])]",
                "chart-other")  # fmt: skip
    assert other == ["round", [["train_rmse", 300], ["validation_mae", 1], ["validation_rmse", 300]]]
    assert not browser.find_element(By.ID, "chart-validation").is_displayed()
    elsewhere = "\u201cOther metrics by step\u201d"
    said = browser.find_element(By.ID, "chart-validation-empty").text
    assert said == f"No validation metrics per epoch: this job reports them by step, under {elsewhere}."
    assert elsewhere in browser.find_element(By.ID, "chart-loss-empty").text
    _shot(browser, tmp, "charts-xgboost")


def test_steps_a_retried_attempt_writes_again_replace_the_followed_ones(svc: Service, browser: Any) -> None:
    """A follower that drew rounds 1 to 10 sees attempt 2, which continues from round 5's checkpoint, draw rounds 6 to
    10 again: once each, with the new values (the old ones stayed beside them)."""
    from app.db.models import Checkpoint
    from app.services import checkpoints

    first = [{"key": "validation_rmse", "step": r, "epoch": None, "value": 1.0, "worker": None} for r in range(1, 11)]
    job_id = _fake_job(svc, "retried", JobStatus.RUNNING, framework="xgboost", points=first)
    browser.get(svc.url + f"/ui/jobs/{job_id}")
    drawn = CHART + "return c && c.data && c.data.length ? [c.data[0].x, c.data[0].y] : null"
    _until(browser, lambda d: (d.execute_script(drawn, "chart-other") or [[]])[0] == list(range(1, 11)), "drawn", 30)
    with transaction(svc.runtime.db) as s:
        s.add(Checkpoint(id="c" * 32, job_id=job_id, epoch=5, step=5, uri="file:///c"))
    with transaction(svc.runtime.db) as s:
        checkpoints.forget_metrics_after(session=s, job_id=job_id, checkpoint_id="c" * 32)
    with transaction(svc.runtime.db) as s:
        jobs.add_metrics(session=s, job_id=job_id, points=[{**p, "value": 2.0} for p in first[5:]])
    again = [list(range(1, 11)), [1.0] * 5 + [2.0] * 5]
    _until(browser, lambda d: d.execute_script(drawn, "chart-other") == again, "rounds 6-10 drawn once, anew", 30)


def test_a_failed_job_shows_its_error_once_and_ended_jobs_say_so(svc: Service, browser: Any, tmp: Path) -> None:
    from selenium.webdriver.common.by import By

    trace = "\n".join(f'  File "workers/x.py", line {i}, in step_{i}' for i in range(80))
    error = "the worker failed: ValueError: the label column holds text\nTraceback (most recent call last):\n" + trace
    driver = "worker-7.local:48211:3fa9c01b2d4e"
    failed = _fake_job(svc, "failing", JobStatus.FAILED, framework="xgboost", error_reason="WORKER_FAILED",
                       error_message=error, progress=0.05, progress_message="training: round 0 of 20",
                       worker_id=driver, attempts=[{"attempt": 1, "queue": "q", "worker_id": driver}])  # fmt: skip
    browser.get(svc.url + f"/ui/jobs/{failed}")
    _ended(browser)
    shown = _js(browser, "document.getElementById('error-message').innerText")
    assert shown == error  # once, newlines kept
    assert browser.find_element(By.ID, "error-box").size["height"] < 450  # scrolls within its box
    why = browser.find_element(By.CSS_SELECTOR, "#attempts tbody td:last-child")
    assert why.text == "WORKER_FAILED: the worker failed: ValueError: the label column holds text …"
    assert why.find_element(By.CSS_SELECTOR, "span").get_attribute("title") == "WORKER_FAILED: " + error
    # the driver's id breaks at its colons only: each part on one line
    lines = _js(browser, "Array.from(document.querySelector('#attempts td.driver').querySelectorAll('span')[0]"
                ".childNodes).filter(n => n.nodeType === 3).map(n => { const r = document.createRange(); "
                "r.selectNodeContents(n); return r.getClientRects().length; })")  # fmt: skip
    assert lines == [1, 1, 1], lines
    assert browser.find_element(By.ID, "job-message").text == "Failed at 5% (last: training: round 0 of 20)"
    assert browser.find_element(By.ID, "result").text == "No result: the job failed before it had one."
    assert browser.find_element(By.ID, "error-title").text == "Error"
    _usable(browser)
    _shot(browser, tmp, "failed")

    cancelled = _fake_job(svc, "stopped", JobStatus.CANCELLED, error_reason="CANCELLED",
                          error_message="cancelled on request", progress=0.4,
                          progress_message="epoch 2 of 5")  # fmt: skip
    browser.get(svc.url + f"/ui/jobs/{cancelled}")
    _ended(browser)
    box = browser.find_element(By.ID, "error-box")
    assert box.text == "Cancelled\ncancelled on request" and "cancelled" in box.get_attribute("class").split()
    assert browser.find_element(By.ID, "job-message").text == "Cancelled at 40% (last: epoch 2 of 5)"
    assert browser.find_element(By.ID, "result").text == "No result: the job was cancelled before it had one."


def test_a_running_job_ticks_and_asks_before_a_cancel(svc: Service, browser: Any, tmp: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions

    running = _fake_job(svc, "preparing", JobStatus.RUNNING, worker_id="worker-7.local:48211:3fa9c01b2d4e",
                        progress=0.01, progress_message="preparing the data")  # fmt: skip
    try:
        browser.get(svc.url + f"/ui/jobs/{running}")
        _until(browser, lambda d: d.find_element(By.ID, "job-status").text == "RUNNING", "the job shows", 30)
        first = _until(browser, lambda d: d.find_element(By.ID, "duration").text, "a duration", 30)
        _until(browser, lambda d: d.find_element(By.ID, "duration").text != first, "the duration ticks", 5)
        phases = _until(browser, lambda d: d.find_element(By.ID, "chart-phases-empty").text, "the phases say", 30)
        assert phases == "No phase timings yet: each worker reports them with its steps."
        assert browser.find_element(By.ID, "job-message").text == "1% · preparing the data"
        assert browser.find_element(By.ID, "result").text == "No result yet."
        browser.find_element(By.ID, "cancel").click()
        alert = _until(browser, expected_conditions.alert_is_present(), "a confirmation", 5)
        assert alert.text == "Cancel preparing?"
        alert.dismiss()
        time.sleep(0.5)
        assert svc.client.get(f"/jobs/{running}").json()["status"] == "RUNNING"
        browser.find_element(By.ID, "cancel").click()
        _until(browser, expected_conditions.alert_is_present(), "a confirmation", 5).accept()
        svc.wait(running, {"CANCELLING"}, timeout=10)
    finally:
        with transaction(svc.runtime.db) as s:
            jobs.transition(session=s, job_id=running, sources=[JobStatus.RUNNING], target=JobStatus.CANCELLING)
            jobs.transition(session=s, job_id=running, sources=[JobStatus.CANCELLING], target=JobStatus.CANCELLED,
                            finished_at=utcnow(), error_reason="CANCELLED", error_message="a fixture")  # fmt: skip


def test_models_and_cluster_pages(svc: Service, browser: Any, tmp: Path) -> None:
    import tarfile
    import zipfile

    from selenium.webdriver.common.by import By

    trained = svc.client.get("/models/console-a/versions/1").json()
    with transaction(svc.runtime.db) as s:  # models named to come first, so that console-a's card is further down,
        for i in range(106):  # past the first page of GET /models (the page showed only the first 100 models)
            models.register_version(session=s, name=f"aaa-{i:03}", framework="torch", job_id=None,
                                    artifact_uri=trained["artifact_uri"], metrics={}, params={})  # fmt: skip
    _requested(browser)
    browser.get(svc.url + "/ui/models#console-a")  # the job page's Model link
    card = _until(browser, lambda d: d.find_elements(By.ID, "console-a"), "the model is listed", 30)[0]
    where = "const r = arguments[0].getBoundingClientRect(); return [window.scrollY, r.top, r.bottom, innerHeight]"
    scrolled, top, bottom, height = _until(browser, lambda d: (w := d.execute_script(where, card))[0] > 0 and w,
                                           "it scrolls there", 10)  # fmt: skip
    assert top >= 0 and bottom <= height, (scrolled, top, bottom, height)
    alias = card.find_element(By.CSS_SELECTOR, ".alias-form input")
    card.find_element(By.CSS_SELECTOR, ".alias-form button").click()  # nothing typed: the browser asks for one
    assert browser.execute_script("return arguments[0].validity.valueMissing", alias) is True
    alias.send_keys("bad alias!")
    card.find_element(By.CSS_SELECTOR, ".alias-form button").click()
    error = _until(browser, lambda d: card.find_element(By.CSS_SELECTOR, ".alias-error").text, "the refusal", 30)
    assert error == ("Alias \u201cbad alias!\u201d was not set: letters, digits, '.', '_' or '-', starting with a "
                     "letter (at most 100).")  # fmt: skip
    assert alias.get_attribute("value") == "bad alias!" and not browser.find_element(By.ID, "notice").is_displayed()
    assert [u for u in _requested(browser) if "/aliases/" in u] == [svc.url + "/models/console-a/aliases/bad%20alias!"]
    alias.clear()
    alias.send_keys("champion")
    card.find_element(By.CSS_SELECTOR, ".alias-form button").click()
    _until(browser, lambda d: "champion → v1" in d.find_element(By.ID, "console-a").text, "the alias is set", 30)
    assert not browser.find_element(By.CSS_SELECTOR, "#console-a .alias-error").is_displayed()
    listed = {m["name"]: m for m in svc.client.get("/models", params={"limit": 1000}).json()["items"]}
    assert listed["console-a"]["aliases"] == {"champion": 1}
    buttons = browser.find_elements(By.CSS_SELECTOR, "#console-a tr[data-version='1'] .downloads button")
    assert [b.get_attribute("data-format") for b in buttons] == ["archive", "mlflow", "onnx"]
    for button in buttons:
        saved = _download(browser, button, tmp / "downloads" / str(button.get_attribute("data-format")))
        with tarfile.open(saved) if saved.suffix == ".gz" else zipfile.ZipFile(saved) as archive:
            names = archive.getnames() if isinstance(archive, tarfile.TarFile) else archive.namelist()
        assert {"console-a-v1.tar.gz": "spec.json", "console-a-v1-mlflow.zip": "MLmodel",
                "console-a-v1-onnx.zip": "model.onnx"}[saved.name] in {Path(n).name for n in names}  # fmt: skip
    _usable(browser)
    _shot(browser, tmp, "models")
    browser.get(svc.url + "/ui/cluster")
    _until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#executors tbody tr"), "executors", 30)
    assert "local[2]" in browser.find_element(By.ID, "cluster-facts").text
    overlaps = browser.execute_script(
        "return Array.from(document.querySelectorAll('dl.facts dt')).filter(dt => dt.scrollWidth > dt.clientWidth "
        "|| dt.getBoundingClientRect().right > dt.nextElementSibling.getBoundingClientRect().left).map(dt => "
        "dt.textContent)"
    )
    assert overlaps == [], f"labels run into their values: {overlaps}"
    _usable(browser)
    _shot(browser, tmp, "cluster")


def test_models_page_shows_tags_and_aliases_and_a_delete_in_use_names_its_jobs(
    svc: Service, browser: Any, tmp: Path
) -> None:
    """A model registered without training (the page reads the registry only), tagged and aliased through the API as
    a client would: the model's tags, and each version's aliases and tags, show on its card (a value holding markup as
    text, a long one cut in its badge and whole in its title). A delete asks first; a 409 lists the unfinished job
    that uses the version, linked; once that job has ended the delete goes through."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions

    name, long = "tagged", "x" * 100
    for _ in (1, 2):
        with transaction(svc.runtime.db) as s:
            models.register_version(session=s, name=name, framework="xgboost", job_id=None,
                                    artifact_uri="file:///nowhere", metrics={}, params={})  # fmt: skip
    edits = [(f"/models/{name}/tags/team", {"value": "fraud"}), (f"/models/{name}/versions/1/tags/validated",
             {"value": ""}), (f"/models/{name}/versions/1/tags/stage", {"value": HOSTILE}),
             (f"/models/{name}/versions/2/tags/notes", {"value": long}), (f"/models/{name}/aliases/production",
             {"version": 1}), (f"/models/{name}/aliases/champion", {"version": 1}),
             (f"/models/{name}/aliases/challenger", {"version": 2})]  # fmt: skip
    for url, body in edits:
        assert svc.client.put(url, json=body).status_code == 200, url
    with transaction(svc.runtime.db) as s:  # an evaluation of version 1 still queued
        job, _ = jobs.create_job(session=s, job_type="evaluate", request={}, framework="xgboost", name=name)
        job.model_name, job.model_version = name, 1
        user = job.id

    browser.get(svc.url + f"/ui/models#{name}")
    row = f"#{name} tr[data-version='%d']"
    texts = lambda css: [e.text for e in browser.find_elements(By.CSS_SELECTOR, css)]  # noqa: E731
    _until(browser, lambda d: texts(f"#{name} .model-tags"), "the model's tags", 30)
    assert texts(f"#{name} .model-tags") == ["Tags: team = fraud"]
    assert texts(f"{row % 1} .badge.alias") == ["champion", "production"]
    assert texts(f"{row % 2} .badge.alias") == ["challenger"]
    assert texts(f"{row % 1} td.tags .badge") == [f"stage = {HOSTILE}", "validated"]
    notes = browser.find_element(By.CSS_SELECTOR, f"{row % 2} td.tags .badge")
    assert notes.text == "notes = " + long[:80] + "…" and notes.get_attribute("title") == "notes = " + long
    assert _js(browser, "document.querySelectorAll('main script').length") == 0
    _usable(browser)
    _shot(browser, tmp, "models-tags")

    def delete(css: str, answer: bool) -> str:
        browser.find_element(By.CSS_SELECTOR, css).click()
        alert = _until(browser, expected_conditions.alert_is_present(), "a confirmation", 5)
        said = str(alert.text)
        alert.accept() if answer else alert.dismiss()
        return said

    said = delete(f"{row % 1} button.delete", answer=False)
    assert said.startswith(f"Delete {name} v1? Its aliases and tags go with it"), said
    time.sleep(0.5)
    assert svc.client.get(f"/models/{name}/versions/1").status_code == 200
    delete(f"{row % 1} button.delete", answer=True)
    refusal = _until(browser, lambda d: d.find_element(By.CSS_SELECTOR, f"#{name} .delete-error").text, "the 409", 30)
    assert refusal.startswith(f"{name} v1 was not deleted: Model '{name}' version 1 is in use"), refusal
    links = browser.find_elements(By.CSS_SELECTOR, f"#{name} .delete-error a")
    assert [a.get_attribute("href") for a in links] == [svc.url + f"/ui/jobs/{user}"]
    _shot(browser, tmp, "models-delete-in-use")
    with transaction(svc.runtime.db) as s:
        jobs.transition(session=s, job_id=user, sources=[JobStatus.QUEUED], target=JobStatus.CANCELLED,
                        finished_at=utcnow(), error_reason="CANCELLED", error_message="a fixture")  # fmt: skip
    delete(f"{row % 1} button.delete", answer=True)
    _until(browser, lambda d: not d.find_elements(By.CSS_SELECTOR, row % 1), "the version goes", 30)
    assert not browser.find_element(By.CSS_SELECTOR, f"#{name} .delete-error").is_displayed()
    assert svc.client.get(f"/models/{name}/versions/1").status_code == 404
    assert texts(f"{row % 2} .badge.alias") == ["challenger"]
    said = delete(f"#{name} .model-head button.delete", answer=True)
    assert said.startswith(f"Delete model {name} with its version, aliases and tags?"), said
    _until(browser, lambda d: not d.find_elements(By.ID, name), "the model goes", 30)
    assert svc.client.get(f"/models/{name}").status_code == 404


def test_console_urls_land_on_their_pages(svc: Service, browser: Any) -> None:
    """Other spellings of the pages' URLs redirect to them, and the pages carry their icon (no /favicon.ico, a 404)."""
    from selenium.webdriver.common.by import By

    _requested(browser)
    for path, lands, heading in (("/", "/ui", "Jobs"), ("/ui/", "/ui", "Jobs"), ("/ui/jobs", "/ui", "Jobs"),
                                 ("/ui/models/", "/ui/models", "Models"), ("/ui/cluster/", "/ui/cluster", "Cluster"),
                                 ("/ui/compare/?ids=a,b", "/ui/compare?ids=a,b", "Compare jobs")):  # fmt: skip
        browser.get(svc.url + path)
        assert browser.current_url == svc.url + lands and browser.find_element(By.TAG_NAME, "h1").text == heading
    time.sleep(0.5)  # a browser asks for /favicon.ico after the page has loaded
    asked = [u for u in _requested(browser) if u.startswith(svc.url)]
    assert not [u for u in asked if "favicon" in u], asked


def test_the_jobs_table_keeps_focus_and_finds_older_jobs_by_url(svc: Service, browser: Any, tmp: Path) -> None:
    """An old job behind 120 newer ones, a tune with two trials; the table is redrawn every 2 s."""
    from selenium.webdriver.common.by import By

    needle = _fake_job(svc, "needle-in-the-jobs", JobStatus.CANCELLED, error_reason="CANCELLED", error_message="old")
    with transaction(svc.runtime.db) as s:
        for i in range(120):
            row, _ = jobs.create_job(session=s, job_type="train", request={}, framework="torch", name=f"filler-{i}")
            jobs.transition(session=s, job_id=row.id, sources=[JobStatus.QUEUED], target=JobStatus.CANCELLED,
                            finished_at=utcnow(), error_reason="CANCELLED", error_message="a fixture")  # fmt: skip
    tune = _fake_job(svc, "tuned", JobStatus.SUCCEEDED, framework="xgboost", job_type="tune")
    trials = [_fake_job(svc, "tuned", JobStatus.SUCCEEDED, framework="xgboost", parent_id=tune, trial=n)
              for n in (1, 2)]  # fmt: skip

    browser.get(svc.url + "/ui")
    box = f"#jobs tbody tr[data-id='{trials[1]}'] input[type=checkbox]"
    _until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, box), "the rows load", 30)
    browser.execute_script("window.__box = document.querySelector(arguments[0]); window.__box.focus(); "
                           "window.__box.click()", box)  # fmt: skip
    updated = browser.find_element(By.ID, "updated").text
    for _ in range(2):  # two refreshes
        _until(browser, lambda d, u=updated: d.find_element(By.ID, "updated").text not in ("", u), "a refresh", 10)
        updated = browser.find_element(By.ID, "updated").text
    kept = "return [document.activeElement === window.__box, window.__box.isConnected, window.__box.checked]"
    assert browser.execute_script(kept) == [True, True, True], "the refresh took the focus or the ticked box"
    assert browser.find_element(By.ID, "compare-selected").text == "Compare selected (1)"
    for n, trial in enumerate(trials, start=1):
        line = browser.find_element(By.CSS_SELECTOR, f"#jobs tbody tr[data-id='{trial}'] .trial")
        assert line.text == f"· trial {n} of tune {tune[:8]}"
        assert line.find_element(By.TAG_NAME, "a").get_attribute("href") == svc.url + f"/ui/jobs/{tune}"
    assert not browser.find_elements(By.CSS_SELECTOR, f"#jobs tbody tr[data-id='{needle}']")
    assert browser.find_element(By.ID, "window-note").text == "The newest 100 jobs."

    browser.find_element(By.ID, "f-model").send_keys("needle")
    row = f"#jobs tbody tr[data-id='{needle}']"
    _until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, row), "the old job is found", 30)
    assert browser.current_url == svc.url + "/ui?model=needle"
    browser.get(svc.url + "/ui?status=CANCELLED&model=needle")
    _until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, row), "found again from the URL alone", 30)
    assert len(browser.find_elements(By.CSS_SELECTOR, "#jobs tbody tr")) == 1
    assert browser.find_element(By.ID, "f-status").get_attribute("value") == "CANCELLED"
    assert browser.find_element(By.ID, "f-model").get_attribute("value") == "needle"
    note = browser.find_element(By.ID, "window-note").text
    assert note == "CANCELLED jobs named \u201cneedle\u201d: 1.", note  # found by the API: all of them
    _usable(browser)
    _shot(browser, tmp, "jobs-filtered")

    browser.get(svc.url + f"/ui/jobs/{tune}")
    _ended(browser)
    assert not browser.find_element(By.ID, "curves").is_displayed()  # a tune job draws its leaderboard instead


# Every text the page's notice box shows, recorded from the first paint (a notice may be cleared a moment later).
RECORD_NOTICES = """
window.__notices = [];
document.addEventListener("DOMContentLoaded", () => {
  const box = document.getElementById("notice");
  if (!box) return;
  new MutationObserver(() => { if (!box.hidden && box.textContent) window.__notices.push(box.textContent); })
    .observe(box, { childList: true, characterData: true, subtree: true, attributes: true });
});
"""


def test_over_the_keys_request_rate_the_pages_wait_and_read_again(spark: Any, tmp: Path) -> None:
    """A key limited to one request a second: each page sends several at once and gets 429s with Retry-After. Reads
    wait and ask again and the event stream reconnects, so the pages fill in without a 'Could not read' notice."""
    from selenium.webdriver.common.by import By

    with running_service(spark, tmp / "limited", api_keys=f"{ALICE}:alice", in_process_consumer=False,
                         owner_quotas={"alice": {"requests_per_s": 1}}) as limited:  # fmt: skip
        # the module's service holds this process's consumer: alice's finished job and model are written directly
        with transaction(limited.runtime.db) as s:
            row, _ = jobs.create_job(session=s, job_type="train", request={}, framework="torch", name="limited-job",
                                     owner="alice")  # fmt: skip
            job = row.id
        with transaction(limited.runtime.db) as s:
            for source, target in ((JobStatus.QUEUED, JobStatus.STARTING), (JobStatus.STARTING, JobStatus.RUNNING),
                                   (JobStatus.RUNNING, JobStatus.SUCCEEDED)):  # fmt: skip
                jobs.transition(session=s, job_id=job, sources=[source], target=target, finished_at=utcnow())
            models.register_version(session=s, name="limited-job", framework="torch", owner="alice", job_id=job,
                                    artifact_uri="file:///nowhere", metrics={}, params={})  # fmt: skip
        driver = _browser(tmp)
        try:
            driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RECORD_NOTICES})
            driver.get(limited.url + "/ui")
            driver.execute_script(f"sessionStorage.setItem('sparktrain.apiKey', '{ALICE}')")
            for page, ready in (
                ("/ui", lambda d: d.find_elements(By.CSS_SELECTOR, f"tr[data-id='{job}']")),
                (f"/ui/jobs/{job}", lambda d: "SUCCEEDED" in d.find_element(By.ID, "content").text),
                ("/ui/models", lambda d: "limited-job" in d.find_element(By.ID, "content").text),
            ):
                driver.get(limited.url + page)
                _until(driver, ready, f"{page} filled in at one request a second", 60)
                time.sleep(3)  # the polls after the first answers
                assert driver.execute_script("return window.__notices") == [], page
            statuses = [
                json.loads(entry["message"])["message"]["params"]["response"]["status"]
                for entry in driver.get_log("performance")
                if json.loads(entry["message"])["message"]["method"] == "Network.responseReceived"
            ]
            assert 429 in statuses, "the pages never went over the rate: the test tests nothing"
        finally:
            driver.quit()


def test_a_choice_among_layer_stacks_shows_each_stack_as_json(svc: Service, browser: Any, tmp: Path) -> None:
    """Tuning walkthrough: a choice among layer stacks read "[object Object],[object Object]" in the leaderboard and
    on the parallel-coordinates axis, every stack alike. Two long stacks alike in their first characters get two
    ticks."""
    from selenium.webdriver.common.by import By

    head = [{"type": "dense", "units": 64, "activation": "relu"}, {"type": "dense", "units": 32, "activation": "relu"}]
    stacks = [
        [{"type": "dense", "units": 16, "activation": "relu"}],
        [*head, {"type": "output", "units": 10, "activation": "softmax"}],
        [*head, {"type": "output", "units": 10, "activation": "log_softmax"}],
    ]
    board = [{"trial": n, "params": {"network.layers": stack, "training.optimizer.learning_rate": 0.001 * (n + 1)},
              "metric": 0.9 - 0.1 * n, "state": "COMPLETE", "epochs": 2, "duration_s": 3.5, "job_id": None,
              "model": None} for n, stack in enumerate(stacks)]  # fmt: skip
    result = {"metric": "accuracy", "mode": "max", "trials": 3, "leaderboard": board, "best": board[0]}
    tune = _fake_job(svc, "stacks", JobStatus.SUCCEEDED, job_type="tune", result=result)

    browser.get(svc.url + f"/ui/jobs/{tune}")
    rows = _until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#leaderboard tbody tr"), "the leaderboard", 30)
    cells = [row.find_elements(By.TAG_NAME, "td")[5] for row in rows]
    assert "[object Object]" not in browser.find_element(By.ID, "tune").text
    compact = json.dumps(stacks[0], separators=(",", ":"))
    assert cells[0].text == f"network.layers = {compact}, training.optimizer.learning_rate = 0.001000", cells[0].text
    assert cells[1].text.endswith("…, training.optimizer.learning_rate = 0.002000"), cells[1].text  # cut at 80
    assert json.loads(cells[2].get_attribute("title").split(" = ")[1].rsplit(", training", 1)[0]) == stacks[2]
    ticks = _until(browser, lambda d: _js(d, "document.getElementById('tune-parallel').data?.[0].dimensions[0]"),
                   "the parallel coordinates", 30)  # fmt: skip
    assert ticks["label"] == "network.layers" and len(set(ticks["ticktext"])) == 3, ticks
    assert ticks["ticktext"][0] == compact[:31] + "…", ticks
    assert [t.rsplit(" ", 1)[1] for t in ticks["ticktext"][1:]] == ["#1", "#2"], ticks  # alike in 31 characters
    assert all("object" not in t for t in ticks["ticktext"]), ticks
    _shot(browser, tmp, "tune-layer-stacks")
