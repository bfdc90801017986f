"""The PySpark data source (format ``mqctl``): batch and streaming reads and writes over a
store, the staging of writes, and shipping the code to executors."""
