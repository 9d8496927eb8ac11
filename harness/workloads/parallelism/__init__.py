"""Training over several devices: the strategies (one process, DataParallel, DDP, FSDP, model
and pipeline parallel), the job they share, the model's cut into stages, where ranks run
(``nodes``) and the launcher that starts them and leaves none behind."""
