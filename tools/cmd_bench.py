"""Placeholder: `mxidx bench` is being written."""
import click


@click.command()
def bench():
    """Not available yet."""
    raise click.ClickException("mxidx bench is not available yet")
