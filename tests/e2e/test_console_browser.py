"""The console and Swagger UI in a real headless Chromium (Debian's chromium and chromium-driver, driven by selenium),
against the running service, with every request outside the service blocked. Screenshots are saved under the test's
tmp dir and copied to var/test-artifacts/; downloads land in the test's tmp dir."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
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

    # The jobs page redraws its rows every 2 s: an element found a moment ago may be gone.
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


def _usable(driver: Any) -> None:
    width = driver.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1], f"horizontal scrolling at 1280x800: {width}"


def test_swagger_ui_renders_offline_and_try_it_out_posts_a_training_job(svc: Service, browser: Any, tmp: Path) -> None:
    from selenium.webdriver.common.by import By

    browser.get(svc.url + "/docs")
    _until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "[id$='-train_train_post']"), "Swagger UI renders")
    block = browser.find_element(By.CSS_SELECTOR, "[id$='-train_train_post']")
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


def test_compare_overlays_two_jobs(svc: Service, browser: Any, tmp: Path) -> None:
    from selenium.webdriver.common.by import By

    first = svc.client.get("/jobs", params={"status": "SUCCEEDED", "limit": 1}).json()["items"][0]
    second = svc.wait(svc.train(digits_job("console-b", epochs=2, workers=1, seed=3))["id"], {"SUCCEEDED", "FAILED"})
    assert second["status"] == "SUCCEEDED", second["error"]
    browser.get(svc.url + "/ui")
    for job_id in (first["id"], second["id"]):
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
    assert traces == [3, 2]
    table = browser.find_element(By.ID, "compare-table").text
    assert "request.training.epochs" in table and "final validation_accuracy" in table
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
            driver.execute_script("sessionStorage.clear()")
            driver.get(keyed.url + "/ui")
            _until(driver, lambda d: d.find_element(By.ID, "key-form").is_displayed(), "the console asks for a key", 30)
            _shot(driver, tmp, "key-form")
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


def test_models_and_cluster_pages(svc: Service, browser: Any, tmp: Path) -> None:
    import tarfile
    import zipfile

    from selenium.webdriver.common.by import By

    browser.get(svc.url + "/ui/models")
    card = _until(browser, lambda d: d.find_elements(By.ID, "console-a"), "the model is listed", 30)[0]
    card.find_element(By.CSS_SELECTOR, ".alias-form input").send_keys("champion")
    card.find_element(By.CSS_SELECTOR, ".alias-form button").click()
    _until(browser, lambda d: "champion → v1" in d.find_element(By.ID, "console-a").text, "the alias is set", 30)
    models = {m["name"]: m for m in svc.client.get("/models").json()["items"]}
    assert models["console-a"]["aliases"] == {"champion": 1}
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
    _usable(browser)
    _shot(browser, tmp, "cluster")


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
