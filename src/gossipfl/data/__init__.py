"""Data layer: datasets, partitions among clients, per-client minibatches, augmentation.

    dataset = load_dataset("fashion_mnist")
    parts = build_partitioner("dirichlet", alpha=0.3).split(
        dataset.train_y.numpy(), num_clients=100, rng=numpy_generator(seed, "partition"))
    sampler = ClientSampler(parts, batch_size=50, seed=seed)
    for idx, mask in sampler.epoch(round=t, epoch=0): ...   # idx, mask: [M, B]
"""

from gossipfl.data.augment import (
    apply_crop_flip,
    crop_flip_params,
    hashed_crop_flip_params,
    random_crop_flip,
)
from gossipfl.data.datasets import (
    DATASETS,
    NORMALIZATION,
    Dataset,
    check_dataset,
    data_root,
    dataset_names,
    from_tensors,
    load_dataset,
    make_synthetic,
    register_dataset,
)
from gossipfl.data.formats import (
    RemoteFile,
    download_file,
    file_digest,
    parse_idx,
    read_cifar_batch,
    read_idx,
    verify_checksum,
)
from gossipfl.data.partition import (
    PARTITIONERS,
    DirichletPartitioner,
    IidPartitioner,
    Partitioner,
    PartitionSummary,
    PathologicalPartitioner,
    build_partitioner,
    local_test_split,
    natural_split,
    partitioner_params,
    register_partitioner,
    summarize_partition,
)
from gossipfl.data.sampler import ClientSampler, shuffled_streams

__all__ = [
    "DATASETS",
    "NORMALIZATION",
    "PARTITIONERS",
    "ClientSampler",
    "Dataset",
    "DirichletPartitioner",
    "IidPartitioner",
    "PartitionSummary",
    "Partitioner",
    "PathologicalPartitioner",
    "RemoteFile",
    "apply_crop_flip",
    "build_partitioner",
    "check_dataset",
    "crop_flip_params",
    "data_root",
    "dataset_names",
    "download_file",
    "file_digest",
    "from_tensors",
    "hashed_crop_flip_params",
    "load_dataset",
    "local_test_split",
    "make_synthetic",
    "natural_split",
    "parse_idx",
    "partitioner_params",
    "random_crop_flip",
    "read_cifar_batch",
    "read_idx",
    "register_dataset",
    "register_partitioner",
    "shuffled_streams",
    "summarize_partition",
    "verify_checksum",
]
