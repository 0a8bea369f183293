"""hpcc_contract/metrics.py: the names the exporters, the controller and the head's Prometheus share."""

from hpcc_contract import metrics


def test_every_series_is_a_valid_prometheus_name_under_the_prefix_with_a_type_and_help():
    for name, (kind, text) in metrics.SERIES.items():
        assert metrics.valid_metric_name(name) and name.startswith(metrics.PREFIX), name
        assert kind in ("counter", "gauge"), name
        assert (kind == "counter") == name.endswith("_total"), f"{name}: counters end in _total, nothing else does"
        assert text and "\n" not in text, name


def test_every_scrape_job_has_its_own_targets_file_and_the_labels_are_valid():
    assert set(metrics.TARGET_FILES) == {metrics.JOB_NODE, metrics.JOB_GPU, metrics.JOB_PROMETHEUS}
    assert len(set(metrics.TARGET_FILES.values())) == len(metrics.TARGET_FILES)
    for label in (metrics.LABEL_NODE, metrics.LABEL_GROUP, metrics.LABEL_INSTANCE_ID):
        assert metrics.valid_label_name(label)
    assert not metrics.valid_label_name("__address__") and not metrics.valid_label_name("1x")
    assert not metrics.valid_metric_name("hpcc-loop") and metrics.valid_metric_name("hpcc:loop")


def test_targeted_states_are_states_the_membership_lists():
    from hpcc_node.hosts import LISTED

    assert set(metrics.TARGETED) <= set(LISTED) and "booting" not in metrics.TARGETED


def test_the_alert_action_is_a_valid_label_whose_values_are_drain_or_event():
    assert metrics.valid_label_name(metrics.ALERT_ACTION_LABEL)
    assert metrics.ALERT_ACTIONS == (metrics.ALERT_ACTION_DRAIN, metrics.ALERT_ACTION_EVENT) == ("drain", "event")
