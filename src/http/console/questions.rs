//! Game questions: the list, one question with its predictions and lock job, creating one and
//! moving its game time.

use std::collections::BTreeMap;

use kickoff_app::console::questions::{
    GameWorkflowForm, QuestionDetail, QuestionRow, QuestionsConsole, QuestionsPage,
};
use kickoff_app::console::Refusal;

use super::jobs::job_row;
use super::{conn, from_ms, ms, operator, refused, Act, ServerConsole, LIST_ROWS};
use crate::accounts::Role;
use crate::questions::game_workflow::GameWorkflowSettings;
use crate::questions::service::NewQuestion;

fn question_row(q: &crate::questions::store::Question) -> QuestionRow {
    QuestionRow {
        id: q.id,
        game: q.game.clone(),
        prompt: q.prompt.clone(),
        status: q.status.as_str().to_string(),
        game_ms: ms(q.game_time),
        lock_job_id: q.lock_job_id.map(|id| id.0),
    }
}

#[async_trait::async_trait]
impl QuestionsConsole for ServerConsole {
    async fn questions(&self) -> Result<QuestionsPage, Refusal> {
        operator(Role::Viewer)?;
        let now_ms = self.now_ms().await?;
        let rows = self
            .questions
            .list(None, LIST_ROWS)
            .await
            .map_err(refused)?;
        Ok(QuestionsPage {
            now_ms,
            rows: rows.iter().map(question_row).collect(),
        })
    }

    async fn question(&self, id: i64) -> Result<QuestionDetail, Refusal> {
        operator(Role::Viewer)?;
        let now_ms = self.now_ms().await?;
        let d = self.questions.get(id).await.map_err(refused)?;
        let counts: BTreeMap<&str, (i64, i64)> = d
            .counts
            .iter()
            .map(|c| (c.choice.as_str(), (c.predictions, c.correct)))
            .collect();
        let lock = match d.question.lock_job_id {
            Some(job) => self
                .client
                .completed_attempts(&[job])
                .await
                .map_err(refused)?
                .pop(),
            None => None,
        };
        Ok(QuestionDetail {
            refused_predictions: d.question.refused_predictions,
            // Against the game time, not the attempt's due time: a lock rescued or handed back
            // runs again due from then, and its proof must still say how late the game locked.
            lock_late_ms: lock.as_ref().map(|a| {
                (a.started_at - d.question.game_time)
                    .num_microseconds()
                    .map_or(f64::MAX, |us| us as f64 / 1000.0)
            }),
            lock_node: lock.map(|a| a.node),
            now_ms,
            question: question_row(&d.question),
            correct_choice: d.question.correct_choice.clone(),
            locked_ms: d.question.locked_at.map(ms),
            choices: d
                .question
                .choices
                .iter()
                .map(|c| {
                    let (n, correct) = counts.get(c.as_str()).copied().unwrap_or((0, 0));
                    (c.clone(), n, correct)
                })
                .collect(),
            predictions: d.predictions,
            lock_job: d.lock_job.as_ref().map(job_row),
        })
    }

    async fn create_question(
        &self,
        game: String,
        prompt: String,
        choices: Vec<String>,
        game_ms: i64,
        workflow: Option<GameWorkflowForm>,
    ) -> Result<i64, Refusal> {
        let by = operator(Role::Viewer).ok().map(|op| op.user.name.clone());
        let settings = workflow.map(|w| GameWorkflowSettings {
            notify_url: w.notify_url,
            result_url: w.result_url,
            ..GameWorkflowSettings::default()
        });
        let act = Act {
            action: "question.create".to_string(),
            target: Some(format!("{} / {}", game.trim(), prompt.trim())),
            filter: None,
        };
        self.act(
            act,
            |_| None,
            async |work| {
                let new = NewQuestion {
                    game: &game,
                    prompt: &prompt,
                    choices: &choices,
                    game_time: from_ms("game_time", game_ms)?,
                };
                self.questions
                    .create_in_game_with(conn(work).await?, &new, settings.as_ref(), by.as_deref())
                    .await
                    .map(|(d, _)| d.question.id)
                    .map_err(refused)
            },
        )
        .await
    }

    async fn move_question(&self, id: i64, game_ms: i64) -> Result<(), Refusal> {
        let act = Act {
            action: "question.move".to_string(),
            target: Some(format!("question {id}")),
            filter: None,
        };
        self.act(
            act,
            |_| None,
            async |work| {
                let at = from_ms("game_time", game_ms)?;
                self.questions
                    .update_with(conn(work).await?, id, None, None, Some(at))
                    .await
                    .map(drop)
                    .map_err(refused)
            },
        )
        .await
    }
}
