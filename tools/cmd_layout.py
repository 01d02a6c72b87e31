"""Placeholder: `mxidx layout` is being written."""
import click


@click.command()
def layout():
    """Not available yet."""
    raise click.ClickException("mxidx layout is not available yet")
