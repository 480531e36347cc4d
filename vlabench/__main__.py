from vlabench.cli import app

app(prog_name="vlabench")
