"""The contracts between the service, the worker and the code inside the ranks, each written
once and imported by all three sides. Nothing here imports torch (a test checks it):

    env          the environment variable names a rank receives (and its launcher)
    events       the events-file lines: the writer's builders and the parser, side by side
    checkpoints  the checkpoint policy, and which checkpoint is the best
    rank_files   the files a rank leaves in its log directory: their names, the error record
    data_dir     the layout of the data dir (LAUNCHBAY_DATA_DIR): `DataLayout`
"""
