"""Packaged data files read by blockcli's modules (gpus.json: the --gpu catalogue, see blockcli.hardware)."""
