"""Fixtures every test module may use, and the test tiers.

Tiers (``make test`` runs the fast one, ``make test-all`` every test):

- ``slow``: trains for seconds or more, or repeats a cross-product that a representative of
  the fast tier already covers; left out of ``make test``.
- ``distributed``: starts several processes (the torch.distributed backend).
- ``docs``: runs a code block of the documentation.
- ``data``: reads the real Fashion-MNIST files (skips where they cannot be had).

``make test`` is ``-m "not slow"``: every module keeps its fast tests there, so a change to any
module meets a test within minutes; the markers are set in the test modules themselves.
"""

from __future__ import annotations

import pytest
import yaml

from tests.helpers import TINY


@pytest.fixture(autouse=True)
def fast_figures(request, monkeypatch):
    """Skip the per-run figures (about 0.3 s a run) unless the test is ``with_figures``."""
    if not getattr(request.function, "real_figures", False):
        monkeypatch.setattr("gossipfl.results.lifecycle.write_run_figures", lambda run_dir: [])


@pytest.fixture
def work(tmp_path, monkeypatch):
    """A working directory holding tiny.yaml (runs land in ./runs)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    return tmp_path


# --------------------------------------------------------------------------------------------
# The slow tier
# --------------------------------------------------------------------------------------------
#: Tests of the slow tier, ``file::function`` (every parametrization): each took over two
#: seconds on the 2-core machine (``python -m pytest --durations=0``), and its module keeps
#: fast tests in ``make test``. Listed here, one place, rather than decorated one by one.
SLOW: frozenset[str] = frozenset({
    "test_analyze.py::test_cli_hessian_trace_all_models",
    "test_reliability_fourth.py::test_every_algorithm_reads_the_local_length_or_warns_that_it_does_not",
    "test_analyze.py::test_cli_landscapes",
    "test_analyze.py::test_loads_the_checkpoint_models",
    "test_analyze.py::test_same_seed_same_numbers",
    "test_analyze.py::test_top_eigenvalue_matches_a_direct_computation",
    "test_api.py::test_different_seed_different_numbers",
    "test_api.py::test_loop_and_vmap_oracles_agree_end_to_end",
    "test_api.py::test_lr_decay_schedule",
    "test_api.py::test_result_shapes_and_metrics",
    "test_api.py::test_same_seed_same_numbers_and_chunking_does_not_matter",
    "test_block_major.py::test_augmented_images_give_the_step_major_numbers",
    "test_cli.py::test_data_prints_partition_and_plots",
    "test_cli.py::test_installed_command_killed_then_resumed",
    "test_cli.py::test_interrupt_then_resume_matches_uninterrupted",
    "test_cli.py::test_interrupted_sweep_resumes",
    "test_cli.py::test_quickstart_runs_without_a_config",
    "test_cli.py::test_run_out_and_name_and_quiet",
    "test_cli.py::test_run_prints_summary_and_writes_run_directory",
    "test_cli.py::test_sweep_then_report",
    "test_cli.py::test_unnamed_run_directories_never_collide",
    "test_compressors.py::test_rand_k_scaled_is_unbiased_and_unscaled_is_biased_by_k_over_p",
    "test_data_formats.py::test_real_fashion_mnist_from_debian_package",
    "test_distributed.py::test_a_killed_rank_ends_the_job_naming_it_and_the_run_resumes",
    "test_distributed.py::test_a_stalled_rank_ends_the_job_after_the_timeout_naming_it",
    "test_divergence.py::test_cli_exits_3",
    "test_divergence.py::test_diverged_run_keeps_its_metrics",
    "test_divergence.py::test_sweep_records_a_diverged_run_and_goes_on",
    "test_fused_step.py::test_the_fused_step_is_taken_for_every_setting",
    "test_gpu_paths.py::test_small_cpu_run_writes_every_section",
    "test_hessian.py::test_each_model_gets_its_own_hessian",
    "test_hessian.py::test_lsq_top_eigenvalues_match_numpy",
    "test_hessian.py::test_lsq_trace_estimate_is_within_its_standard_error",
    "test_hessian.py::test_mlp_hvp_matches_dense_autograd_hessian",
    "test_hessian.py::test_mlp_top_eigenvalue_is_the_largest_in_magnitude",
    "test_hessian.py::test_recurrent_model_products_by_reverse_over_reverse_equal_double_backward",
    "test_hessian.py::test_small_eigengap_converges_by_residual_and_sorts_by_magnitude",
    "test_kernels.py::test_radix_selection_is_the_kth_smallest_of_non_negative_floats",
    "test_landscape.py::test_random_directions_are_deterministic",
    "test_leaf_emnist.py::test_lstm_loop_and_vmap_gradients_agree_but_config_vmap_is_refused",
    "test_leaf_emnist.py::test_lstm_two_rounds_on_shakespeare_through_the_api",
    "test_membership.py::test_a_run_directory_interrupted_and_resumed_records_the_same_metrics",
    "test_membership.py::test_held_out_samples_never_enter_training",
    "test_membership.py::test_membership_metrics_and_epsilon_survive_resume_exactly",
    "test_models.py::test_resnet18_counts_and_options",
    "test_plugins.py::test_cli_plugin_flag_and_sweep",
    "test_plugins.py::test_cli_run_with_plugin_in_config_records_absolute_path",
    "test_plugins.py::test_design_example_personalized_keeps_the_head_home",
    "test_plugins.py::test_run_directory_config_reloads_plugin_in_a_fresh_process",
    "test_python_verbs.py::test_analyze_from_python",
    "test_python_verbs.py::test_notebook_runs",
    "test_python_verbs.py::test_report_writes_and_returns_the_report",
    "test_python_verbs.py::test_stability_from_python",
    "test_python_verbs.py::test_sweep_again_skips_finished_runs_and_logs_when_asked",
    "test_reliability.py::test_a_diverged_run_is_done",
    "test_reliability.py::test_a_study_run_killed_before_writing_anything_starts_afresh",
    "test_reliability.py::test_disk_full_at_a_checkpoint_fails_cleanly_and_resumes",
    "test_reliability.py::test_failed_runs_make_the_study_fail_then_are_retried",
    "test_reliability.py::test_sigterm_to_a_real_process",
    "test_reliability_commands.py::test_analyze_an_lstm_run",
    "test_reliability_inputs.py::test_plugin_model_without_a_head",
    "test_results.py::test_a_long_legend_goes_below_the_axes_and_fits_the_figure",
    "test_results.py::test_report_on_run_directories",
    "test_scaffold.py::test_generated_tests_pass_unchanged_with_pytest",
    "test_sequential.py::test_waves_equal_one_client_at_a_time_with_minibatches",
    "test_sgp.py::test_sgp_resumes_from_a_checkpoint",
    "test_stability_study.py::test_cli_study_writes_csv_table_and_figures",
    "test_stacked_oracle.py::test_chunks_and_memory_budget_give_the_same_numbers",
    "test_startup.py::test_lazy_analysis_names_resolve",
    "test_sweep.py::test_parallel_driver_writes_the_runs_a_sweep_then_skips",
    "test_sweep.py::test_run_study_refuses_a_run_directory_with_another_config",
    "test_sweep.py::test_run_study_resumes_interrupted_runs",
    "test_sweep.py::test_run_study_then_rerun_skips",
    "test_sweep.py::test_study_analysis_adds_flatness_columns",
    "test_sweep.py::test_study_without_analysis_has_no_flatness_columns",
    "test_topology.py::test_authors_random_graph_is_the_codes_draw_literally",
    "test_topology.py::test_mixer_auto_sparse_and_errors",
    "test_pack.py::test_packed_runs_equal_the_runs_alone_bit_for_bit",
    "test_pack.py::test_an_interrupted_packed_sweep_resumes_to_the_same_numbers",
    "test_pack.py::test_a_model_whose_rows_are_not_64_byte_aligned_agrees_to_float_rounding",
    "test_topology_toolkit.py::test_base_k_lengths",
    "test_topology_toolkit.py::test_connectivity_is_checked_over_a_whole_period",
    "test_tracking.py::test_tracking_reaches_the_optimum_where_dpsgd_stalls",
    "test_unbalanced.py::test_consensus_of_a_replicated_server_model_is_zero_without_work",
})

#: Cross-product suites (every algorithm, oracle or model): the first parametrization stays in
#: the fast tier as the family's representative, the others are slow.
REPRESENTED: frozenset[str] = frozenset({
    "test_adpsgd.py::test_waves_equal_the_literal_event_loop_with_stragglers",
    "test_algorithms_fedsagd.py::test_resume_from_a_checkpoint_repeats_the_run",
    "test_api.py::test_every_algorithm_learns_on_synthetic_data",
    "test_block_major.py::test_every_algorithm_gives_the_step_major_numbers",
    "test_block_major.py::test_every_oracle_gives_the_step_major_numbers",
    "test_block_major.py::test_other_orders_give_the_step_major_numbers",
    "test_client_streams.py::test_subset_trained_alone_equals_trained_with_all",
    "test_compressed_gossip.py::test_identity_compression_with_unit_step_changes_no_algorithm",
    "test_distributed.py::test_a_run_resumes_with_another_number_of_ranks",
    "test_distributed.py::test_every_algorithm_gives_the_same_numbers_on_1_2_and_4_ranks",
    "test_distributed.py::test_group_masked_and_multi_step_gossip_match_one_process",
    "test_fused_step.py::test_every_algorithm_gives_the_unfused_numbers_bitwise",
    "test_fused_step.py::test_loss_and_step_is_the_unfused_step_bitwise",
    "test_hessian.py::test_batched_equals_per_model_loop",
    "test_kernels.py::test_deliver_fused_equals_the_torch_definition_bitwise",
    "test_kernels.py::test_fused_kernels_equal_the_torch_definition_bitwise",
    "test_models.py::test_output_shape_no_batchnorm_and_head",
    "test_oracle.py::test_evaluate_stack_equals_per_model_loop",
    "test_oracle.py::test_fp32_vmap_and_loop_agree",
    "test_oracle.py::test_gradient_of_some_parameters_is_those_columns_of_the_full_gradient",
    "test_oracle.py::test_oracles_match_autograd_reference",
    "test_oracle.py::test_predict_own_and_shared_inputs",
    "test_personalized.py::test_every_personalized_algorithm_runs_with_the_personalized_protocol",
    "test_personalized.py::test_resuming_from_a_checkpoint_repeats_the_run",
    "test_pinned.py::test_metrics_match_pinned_values",
    "test_precision.py::test_on_cpu_every_precision_is_float32_with_a_warning",
    "test_reliability.py::test_report_names_a_damaged_metrics_file_and_never_calls_it_failed",
    "test_reliability.py::test_signal_stops_after_the_round_with_its_checkpoint",
    "test_reliability_commands.py::test_report_leaves_out_a_run_with_a_damaged_file",
    "test_results.py::test_resume_repeats_the_uninterrupted_run",
    "test_stability_study.py::test_identical_data_stay_identical_and_neighbours_drift",
    "test_stacked_oracle.py::test_builtin_models_match_reference_and_loop",
    "test_stacked_oracle.py::test_layer_and_layout_paths_match_reference",
    "test_startup.py::test_quick_commands_import_little",
    "test_sweep.py::test_every_example_parses",
    "test_unbalanced.py::test_compact_rounds_equal_clients_advanced_one_at_a_time",
})


#: Modules whose every test starts several processes (torch.distributed).
DISTRIBUTED = frozenset({"test_distributed.py"})


def pytest_collection_modifyitems(config, items):
    seen: set[str] = set()
    for item in items:
        key = f"{item.path.name}::{item.originalname}"
        if key in SLOW or (key in REPRESENTED and key in seen):
            item.add_marker(pytest.mark.slow)
        if item.path.name in DISTRIBUTED:
            item.add_marker(pytest.mark.distributed)
        seen.add(key)
