"""What every stage shows the person at the terminal, below every stage: the progress bar
(`console.progress.progress_bar`, drawn only where someone watches), the one way every stage
draws one. It imports nothing of the project: any package may import it."""
