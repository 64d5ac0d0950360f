"""Deep Q-learning in a tiny corridor: an agent plays while it trains, its experience goes into a replay buffer,
and an `IterableDataset` feeds the Trainer batches sampled from that buffer. The corridor is written here (no gym):
the agent starts at the left end and earns 1 for reaching the right end. Written as for Lightning: replacing
`statemachine` with `lightning.pytorch` in the imports is the only change it needs to run there.

    python examples/dqn.py [--max-epochs N] [--root DIR] [--length CELLS]
"""

from __future__ import annotations

import argparse
import os
import random
from collections import deque
from collections.abc import Iterator
from typing import NamedTuple

import torch
from torch import nn
from torch.utils.data import DataLoader, IterableDataset

import statemachine as L
from statemachine import cli_lightning_logo
from statemachine.loggers import CSVLogger


class Corridor:
    """Cells 0 to length-1; action 0 steps left, 1 steps right. Reaching the last cell pays 1 and ends the
    episode; every other step costs 0.01, and an episode is cut after 4 * length steps."""

    def __init__(self, length: int) -> None:
        self.length = length
        self.reset()

    def observation(self) -> torch.Tensor:
        return nn.functional.one_hot(torch.tensor(self.position), self.length).float()

    def reset(self) -> torch.Tensor:
        self.position, self.steps = 0, 0
        return self.observation()

    def step(self, action: int) -> tuple[torch.Tensor, float, bool]:
        self.position = min(max(self.position + (1 if action == 1 else -1), 0), self.length - 1)
        self.steps += 1
        reached = self.position == self.length - 1
        return self.observation(), 1.0 if reached else -0.01, reached or self.steps >= 4 * self.length


class Experience(NamedTuple):
    state: torch.Tensor
    action: int
    reward: float
    done: bool
    new_state: torch.Tensor


class ReplayBuffer:
    """The last `capacity` experiences, sampled uniformly."""

    def __init__(self, capacity: int) -> None:
        self.buffer: deque[Experience] = deque(maxlen=capacity)

    def __len__(self) -> int:
        return len(self.buffer)

    def append(self, experience: Experience) -> None:
        self.buffer.append(experience)

    def sample(self, count: int) -> list[Experience]:
        return random.choices(self.buffer, k=count)


class RLDataset(IterableDataset):
    """`sample_size` experiences from the buffer per pass: one epoch of the Trainer."""

    def __init__(self, buffer: ReplayBuffer, sample_size: int) -> None:
        self.buffer = buffer
        self.sample_size = sample_size

    def __iter__(self) -> Iterator[Experience]:
        yield from self.buffer.sample(self.sample_size)


class Agent:
    """Plays the corridor epsilon-greedily with a Q-network and stores what happens."""

    def __init__(self, env: Corridor, buffer: ReplayBuffer) -> None:
        self.env = env
        self.buffer = buffer
        self.state = env.reset()

    def get_action(self, net: nn.Module, epsilon: float, device: torch.device) -> int:
        if random.random() < epsilon:
            return random.randrange(2)
        with torch.no_grad():
            return int(net(self.state.to(device).unsqueeze(0)).argmax(dim=1))

    def play_step(self, net: nn.Module, epsilon: float, device: torch.device) -> tuple[float, bool]:
        action = self.get_action(net, epsilon, device)
        new_state, reward, done = self.env.step(action)
        self.buffer.append(Experience(self.state, action, reward, done, new_state))
        self.state = self.env.reset() if done else new_state
        return reward, done


def q_network(observations: int, hidden: int = 32) -> nn.Module:
    return nn.Sequential(nn.Linear(observations, hidden), nn.ReLU(), nn.Linear(hidden, 2))


class DQNLightning(L.LightningModule):
    def __init__(
        self,
        length: int = 8,
        batch_size: int = 16,
        lr: float = 3e-3,
        gamma: float = 0.9,
        sync_rate: int = 10,
        replay_size: int = 1000,
        warm_start_steps: int = 200,
        eps_start: float = 1.0,
        eps_end: float = 0.01,
        eps_last_frame: int = 200,
        episode_length: int = 400,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = q_network(length)
        self.target_net = q_network(length)
        self.buffer = ReplayBuffer(replay_size)
        self.agent = Agent(Corridor(length), self.buffer)
        self.episode_reward = 0.0
        self.total_reward = 0.0
        self.populate(warm_start_steps)

    def populate(self, steps: int) -> None:
        """Fill the buffer with random play, so the first batches have something to learn from."""
        for _ in range(steps):
            self.agent.play_step(self.net, epsilon=1.0, device=torch.device("cpu"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def dqn_mse_loss(self, batch: Experience) -> torch.Tensor:
        states, actions, rewards, dones, next_states = batch
        values = self.net(states).gather(1, actions.unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            next_values = self.target_net(next_states).max(dim=1).values.masked_fill(dones, 0.0)
        targets = rewards.float() + self.hparams.gamma * next_values
        return nn.functional.mse_loss(values, targets)

    def epsilon(self) -> float:
        progress = min(1.0, self.global_step / self.hparams.eps_last_frame)
        return self.hparams.eps_start + progress * (self.hparams.eps_end - self.hparams.eps_start)

    def training_step(self, batch: Experience, batch_idx: int) -> torch.Tensor:
        reward, done = self.agent.play_step(self.net, self.epsilon(), self.device)
        self.episode_reward += reward
        if done:
            self.total_reward, self.episode_reward = self.episode_reward, 0.0
        loss = self.dqn_mse_loss(batch)
        if self.global_step % self.hparams.sync_rate == 0:
            self.target_net.load_state_dict(self.net.state_dict())
        self.log_dict({"train_loss": loss, "total_reward": self.total_reward, "epsilon": self.epsilon()})
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.net.parameters(), lr=self.hparams.lr)

    def train_dataloader(self) -> DataLoader:
        dataset = RLDataset(self.buffer, self.hparams.episode_length)
        return DataLoader(dataset, batch_size=self.hparams.batch_size)


def greedy_episode(model: DQNLightning) -> tuple[int, float]:
    """Steps and reward of one episode played with the learned Q-values alone."""
    env = Corridor(model.hparams.length)
    state, total, done = env.reset(), 0.0, False
    while not done:
        with torch.no_grad():
            action = int(model(state.unsqueeze(0)).argmax(dim=1))
        state, reward, done = env.step(action)
        total += reward
    return env.steps, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-epochs", type=int, default=10)
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "runs", "dqn"))
    parser.add_argument("--length", type=int, default=8)
    args = parser.parse_args()

    L.seed_everything(42)
    model = DQNLightning(length=args.length)
    trainer = L.Trainer(
        max_epochs=args.max_epochs, default_root_dir=args.root, logger=CSVLogger(args.root), log_every_n_steps=5
    )
    trainer.fit(model)
    steps, reward = greedy_episode(model)
    print(f"greedy episode: {steps} steps, reward {reward:.2f} (the shortest path is {args.length - 1} steps)")


if __name__ == "__main__":
    cli_lightning_logo()
    main()
