//! The built-in pages' text in each language. Sentences are plain text (the template
//! escapes them); a counted phrase lists its plural forms, `{n}` standing for the number.
//!
//! Durations are always shown after a label ("Estimated wait: 5 minutes"), so that every
//! language can give them in the nominative whatever their grammar would ask after "in".

use crate::page::format::Digits;
use crate::page::language::Language;
use crate::page::plural::{Forms, Plural::*, Rule};

/// One language's text.
pub(crate) struct Strings {
    /// How numbers are counted for plural forms.
    pub(crate) rule: Rule,
    /// Which digits numbers are written with.
    pub(crate) digits: Digits,
    /// Title of the queue page.
    pub(crate) title_queue: &'static str,
    /// Title of the pre-queue page.
    pub(crate) title_prequeue: &'static str,
    /// Title of the reject page.
    pub(crate) title_reject: &'static str,
    /// The queue page's explanation.
    pub(crate) queue_intro: &'static str,
    /// Label before the position.
    pub(crate) position_label: &'static str,
    /// Label before the estimated wait.
    pub(crate) wait_label: &'static str,
    /// Said when the wait cannot be estimated.
    pub(crate) wait_unknown: &'static str,
    /// The pre-queue page's explanation: the event has not started, the visitor will be
    /// placed in line when it does.
    pub(crate) prequeue_intro: &'static str,
    /// Label before the time until the event starts.
    pub(crate) prequeue_label: &'static str,
    /// The order is drawn at random at the start: no need to arrive early.
    pub(crate) prequeue_shuffle: &'static str,
    /// The reject page's explanation.
    pub(crate) reject_intro: &'static str,
    /// "Please try again in {n} seconds."
    pub(crate) retry: Forms,
    /// "This page refreshes every {n} seconds."
    pub(crate) refresh: Forms,
    /// A duration under a minute.
    pub(crate) less_than_a_minute: &'static str,
    /// What a formatted time says when it is not known (Cloudflare's `unavailable`).
    pub(crate) unavailable: &'static str,
    /// `{n}` minutes.
    pub(crate) minutes: Forms,
    /// `{n}` hours.
    pub(crate) hours: Forms,
    /// `{n}` days.
    pub(crate) days: Forms,
    /// Joins two units of a duration ("1 hour and 5 minutes").
    pub(crate) and: &'static str,
    /// The same, before a unit written with a digit first (Hebrew writes `ו־5`).
    pub(crate) and_before_digit: &'static str,
}

/// The text of `language`.
pub(crate) fn strings(language: Language) -> &'static Strings {
    &ALL[language.index()]
}

/// In the order of [`Language::ALL`].
static ALL: [Strings; 16] = [
    EN, DE, FR, ES, IT, PT, NL, PL, RU, TR, JA, ZH, KO, AR, HE, FA,
];

const EN: Strings = Strings {
    rule: Rule::OneOther,
    digits: Digits::Latin,
    title_queue: "You are in line",
    title_prequeue: "The event starts soon",
    title_reject: "This site is busy",
    queue_intro: "This site is very busy right now. You are in line and will be let in \
                  automatically; please keep this page open.",
    position_label: "Your place in line:",
    wait_label: "Estimated wait:",
    wait_unknown: "The wait cannot be estimated yet.",
    prequeue_intro: "The event has not started yet. When it starts, you will be placed in line \
                     automatically; please keep this page open.",
    prequeue_label: "Time until the start:",
    prequeue_shuffle: "When the event starts, the order of everyone waiting here will be drawn \
                       at random, so there is no need to arrive early.",
    reject_intro: "This site is at capacity right now.",
    retry: &[
        (One, "Please try again in {n} second."),
        (Other, "Please try again in {n} seconds."),
    ],
    refresh: &[
        (One, "This page refreshes every second."),
        (Other, "This page refreshes every {n} seconds."),
    ],
    less_than_a_minute: "less than a minute",
    unavailable: "unavailable",
    minutes: &[(One, "{n} minute"), (Other, "{n} minutes")],
    hours: &[(One, "{n} hour"), (Other, "{n} hours")],
    days: &[(One, "{n} day"), (Other, "{n} days")],
    and: " and ",
    and_before_digit: " and ",
};

const DE: Strings = Strings {
    rule: Rule::OneOther,
    digits: Digits::Latin,
    title_queue: "Sie sind in der Warteschlange",
    title_prequeue: "Die Veranstaltung beginnt bald",
    title_reject: "Diese Website ist ausgelastet",
    queue_intro: "Diese Website ist gerade stark ausgelastet. Sie sind in der Warteschlange \
                  und werden automatisch eingelassen; bitte lassen Sie diese Seite geöffnet.",
    position_label: "Ihr Platz in der Warteschlange:",
    wait_label: "Voraussichtliche Wartezeit:",
    wait_unknown: "Die Wartezeit lässt sich noch nicht abschätzen.",
    prequeue_intro: "Die Veranstaltung hat noch nicht begonnen. Sobald sie beginnt, werden Sie \
                     automatisch in die Warteschlange eingereiht; bitte lassen Sie diese Seite \
                     geöffnet.",
    prequeue_label: "Zeit bis zum Beginn:",
    prequeue_shuffle: "Zu Beginn wird die Reihenfolge aller hier Wartenden ausgelost – früheres \
                       Erscheinen bringt also keinen Vorteil.",
    reject_intro: "Diese Website ist derzeit voll ausgelastet.",
    retry: &[
        (One, "Bitte versuchen Sie es in {n} Sekunde erneut."),
        (Other, "Bitte versuchen Sie es in {n} Sekunden erneut."),
    ],
    refresh: &[
        (One, "Diese Seite aktualisiert sich jede Sekunde."),
        (Other, "Diese Seite aktualisiert sich alle {n} Sekunden."),
    ],
    less_than_a_minute: "weniger als eine Minute",
    unavailable: "nicht verfügbar",
    minutes: &[(One, "{n} Minute"), (Other, "{n} Minuten")],
    hours: &[(One, "{n} Stunde"), (Other, "{n} Stunden")],
    days: &[(One, "{n} Tag"), (Other, "{n} Tage")],
    and: " und ",
    and_before_digit: " und ",
};

const FR: Strings = Strings {
    rule: Rule::ZeroOneOther,
    digits: Digits::Latin,
    title_queue: "Vous êtes dans la file d’attente",
    title_prequeue: "L’événement commence bientôt",
    title_reject: "Ce site est saturé",
    queue_intro: "Ce site est actuellement très sollicité. Vous êtes dans la file d’attente et \
                  serez admis automatiquement\u{a0}; merci de garder cette page ouverte.",
    position_label: "Votre place dans la file\u{a0}:",
    wait_label: "Attente estimée\u{a0}:",
    wait_unknown: "Le temps d’attente ne peut pas encore être estimé.",
    prequeue_intro: "L’événement n’a pas encore commencé. Dès son ouverture, vous serez placé \
                     automatiquement dans la file d’attente\u{a0}; merci de garder cette page \
                     ouverte.",
    prequeue_label: "Début dans\u{a0}:",
    prequeue_shuffle: "Au début de l’événement, l’ordre de passage de toutes les personnes qui \
                       attendent ici sera tiré au sort\u{a0}: inutile donc d’arriver en avance.",
    reject_intro: "Ce site a atteint sa capacité maximale pour le moment.",
    retry: &[
        (One, "Veuillez réessayer dans {n}\u{a0}seconde."),
        (Other, "Veuillez réessayer dans {n}\u{a0}secondes."),
    ],
    refresh: &[
        (One, "Cette page s’actualise toutes les secondes."),
        (
            Other,
            "Cette page s’actualise toutes les {n}\u{a0}secondes.",
        ),
    ],
    less_than_a_minute: "moins d’une minute",
    unavailable: "indisponible",
    minutes: &[(One, "{n}\u{a0}minute"), (Other, "{n}\u{a0}minutes")],
    hours: &[(One, "{n}\u{a0}heure"), (Other, "{n}\u{a0}heures")],
    days: &[(One, "{n}\u{a0}jour"), (Other, "{n}\u{a0}jours")],
    and: " et ",
    and_before_digit: " et ",
};

const ES: Strings = Strings {
    rule: Rule::OneOther,
    digits: Digits::Latin,
    title_queue: "Estás en la cola",
    title_prequeue: "El evento empieza pronto",
    title_reject: "Este sitio está saturado",
    queue_intro: "Este sitio tiene mucho tráfico en este momento. Estás en la cola y entrarás \
                  automáticamente; no cierres esta página.",
    position_label: "Tu posición en la cola:",
    wait_label: "Tiempo de espera estimado:",
    wait_unknown: "Todavía no se puede estimar el tiempo de espera.",
    prequeue_intro: "El evento aún no ha empezado. Cuando empiece, entrarás automáticamente en \
                     la cola; no cierres esta página.",
    prequeue_label: "Tiempo hasta el inicio:",
    prequeue_shuffle: "Cuando empiece el evento, el orden de todas las personas que esperan aquí \
                       se sorteará, así que no hace falta llegar antes.",
    reject_intro: "Este sitio está al máximo de su capacidad en este momento.",
    retry: &[
        (One, "Vuelve a intentarlo dentro de {n} segundo."),
        (Other, "Vuelve a intentarlo dentro de {n} segundos."),
    ],
    refresh: &[
        (One, "Esta página se actualiza cada segundo."),
        (Other, "Esta página se actualiza cada {n} segundos."),
    ],
    less_than_a_minute: "menos de un minuto",
    unavailable: "no disponible",
    minutes: &[(One, "{n} minuto"), (Other, "{n} minutos")],
    hours: &[(One, "{n} hora"), (Other, "{n} horas")],
    days: &[(One, "{n} día"), (Other, "{n} días")],
    and: " y ",
    and_before_digit: " y ",
};

const IT: Strings = Strings {
    rule: Rule::OneOther,
    digits: Digits::Latin,
    title_queue: "Sei in coda",
    title_prequeue: "L’evento inizia a breve",
    title_reject: "Questo sito è sovraccarico",
    queue_intro: "In questo momento il sito è molto affollato. Sei in coda ed entrerai \
                  automaticamente; tieni aperta questa pagina.",
    position_label: "La tua posizione in coda:",
    wait_label: "Attesa stimata:",
    wait_unknown: "Non è ancora possibile stimare l’attesa.",
    prequeue_intro: "L’evento non è ancora iniziato. Quando inizierà, entrerai automaticamente \
                     in coda; tieni aperta questa pagina.",
    prequeue_label: "Inizio tra:",
    prequeue_shuffle: "All’inizio dell’evento l’ordine di tutte le persone in attesa qui verrà \
                       estratto a sorte, quindi non serve arrivare in anticipo.",
    reject_intro: "Al momento questo sito ha raggiunto la capacità massima.",
    retry: &[
        (One, "Riprova tra {n} secondo."),
        (Other, "Riprova tra {n} secondi."),
    ],
    refresh: &[
        (One, "Questa pagina si aggiorna ogni secondo."),
        (Other, "Questa pagina si aggiorna ogni {n} secondi."),
    ],
    less_than_a_minute: "meno di un minuto",
    unavailable: "non disponibile",
    minutes: &[(One, "{n} minuto"), (Other, "{n} minuti")],
    hours: &[(One, "{n} ora"), (Other, "{n} ore")],
    days: &[(One, "{n} giorno"), (Other, "{n} giorni")],
    and: " e ",
    and_before_digit: " e ",
};

const PT: Strings = Strings {
    rule: Rule::ZeroOneOther,
    digits: Digits::Latin,
    title_queue: "Você está na fila",
    title_prequeue: "O evento começa em breve",
    title_reject: "Este site está sobrecarregado",
    queue_intro: "Este site está com muitos acessos no momento. Você está na fila e entrará \
                  automaticamente; mantenha esta página aberta.",
    position_label: "Sua posição na fila:",
    wait_label: "Tempo de espera estimado:",
    wait_unknown: "Ainda não é possível estimar o tempo de espera.",
    prequeue_intro: "O evento ainda não começou. Quando começar, você entrará na fila \
                     automaticamente; mantenha esta página aberta.",
    prequeue_label: "Tempo até o início:",
    prequeue_shuffle: "No início do evento, a ordem de todos que estão esperando aqui será \
                       sorteada, então não é preciso chegar cedo.",
    reject_intro: "Este site está com a capacidade esgotada no momento.",
    retry: &[
        (One, "Tente novamente em {n} segundo."),
        (Other, "Tente novamente em {n} segundos."),
    ],
    refresh: &[
        (One, "Esta página é atualizada a cada segundo."),
        (Other, "Esta página é atualizada a cada {n} segundos."),
    ],
    less_than_a_minute: "menos de um minuto",
    unavailable: "indisponível",
    minutes: &[(One, "{n} minuto"), (Other, "{n} minutos")],
    hours: &[(One, "{n} hora"), (Other, "{n} horas")],
    days: &[(One, "{n} dia"), (Other, "{n} dias")],
    and: " e ",
    and_before_digit: " e ",
};

const NL: Strings = Strings {
    rule: Rule::OneOther,
    digits: Digits::Latin,
    title_queue: "U staat in de wachtrij",
    title_prequeue: "Het evenement begint binnenkort",
    title_reject: "Deze website is overbelast",
    queue_intro: "Het is momenteel erg druk op deze website. U staat in de wachtrij en wordt \
                  automatisch doorgelaten; houd deze pagina open.",
    position_label: "Uw plaats in de wachtrij:",
    wait_label: "Geschatte wachttijd:",
    wait_unknown: "De wachttijd kan nog niet worden geschat.",
    prequeue_intro: "Het evenement is nog niet begonnen. Zodra het begint, wordt u automatisch \
                     in de wachtrij geplaatst; houd deze pagina open.",
    prequeue_label: "Tijd tot de start:",
    prequeue_shuffle: "Bij de start wordt de volgorde van iedereen die hier wacht door loting \
                       bepaald, dus eerder komen heeft geen zin.",
    reject_intro: "Deze website heeft momenteel de maximale capaciteit bereikt.",
    retry: &[
        (One, "Probeer het over {n} seconde opnieuw."),
        (Other, "Probeer het over {n} seconden opnieuw."),
    ],
    refresh: &[
        (One, "Deze pagina wordt elke seconde vernieuwd."),
        (Other, "Deze pagina wordt elke {n} seconden vernieuwd."),
    ],
    less_than_a_minute: "minder dan een minuut",
    unavailable: "niet beschikbaar",
    minutes: &[(One, "{n} minuut"), (Other, "{n} minuten")],
    hours: &[(Other, "{n} uur")],
    days: &[(One, "{n} dag"), (Other, "{n} dagen")],
    and: " en ",
    and_before_digit: " en ",
};

const PL: Strings = Strings {
    rule: Rule::Polish,
    digits: Digits::Latin,
    title_queue: "Jesteś w kolejce",
    title_prequeue: "Wydarzenie wkrótce się rozpocznie",
    title_reject: "Ta strona jest przeciążona",
    queue_intro: "Ta strona jest teraz bardzo obciążona. Jesteś w kolejce i wejdziesz \
                  automatycznie, gdy nadejdzie Twoja kolej; nie zamykaj tej strony.",
    position_label: "Twoje miejsce w kolejce:",
    wait_label: "Szacowany czas oczekiwania:",
    wait_unknown: "Nie można jeszcze oszacować czasu oczekiwania.",
    prequeue_intro: "Wydarzenie jeszcze się nie rozpoczęło. Gdy się rozpocznie, automatycznie \
                     trafisz do kolejki; nie zamykaj tej strony.",
    prequeue_label: "Czas do rozpoczęcia:",
    prequeue_shuffle: "Na początku wydarzenia kolejność wszystkich oczekujących tutaj osób \
                       zostanie wylosowana, więc nie trzeba przychodzić wcześniej.",
    reject_intro: "Ta strona osiągnęła obecnie maksymalne obciążenie.",
    retry: &[
        (One, "Spróbuj ponownie za {n} sekundę."),
        (Few, "Spróbuj ponownie za {n} sekundy."),
        (Other, "Spróbuj ponownie za {n} sekund."),
    ],
    refresh: &[
        (One, "Ta strona odświeża się co sekundę."),
        (Few, "Ta strona odświeża się co {n} sekundy."),
        (Other, "Ta strona odświeża się co {n} sekund."),
    ],
    less_than_a_minute: "mniej niż minuta",
    unavailable: "niedostępne",
    minutes: &[
        (One, "{n} minuta"),
        (Few, "{n} minuty"),
        (Other, "{n} minut"),
    ],
    hours: &[
        (One, "{n} godzina"),
        (Few, "{n} godziny"),
        (Other, "{n} godzin"),
    ],
    days: &[(One, "{n} dzień"), (Other, "{n} dni")],
    and: " i ",
    and_before_digit: " i ",
};

const RU: Strings = Strings {
    rule: Rule::EastSlavic,
    digits: Digits::Latin,
    title_queue: "Вы в очереди",
    title_prequeue: "Мероприятие скоро начнётся",
    title_reject: "Сайт перегружен",
    queue_intro: "Сейчас на сайте очень много посетителей. Вы в очереди и попадёте на сайт \
                  автоматически; не закрывайте эту страницу.",
    position_label: "Ваше место в очереди:",
    wait_label: "Примерное время ожидания:",
    wait_unknown: "Время ожидания пока невозможно оценить.",
    prequeue_intro: "Мероприятие ещё не началось. Как только оно начнётся, вы автоматически \
                     встанете в очередь; не закрывайте эту страницу.",
    prequeue_label: "До начала:",
    prequeue_shuffle: "В момент начала порядок всех, кто ждёт здесь, будет определён случайным \
                       образом, поэтому приходить заранее нет смысла.",
    reject_intro: "Сейчас сайт работает на пределе возможностей.",
    retry: &[
        (One, "Повторите попытку через {n} секунду."),
        (Few, "Повторите попытку через {n} секунды."),
        (Other, "Повторите попытку через {n} секунд."),
    ],
    refresh: &[
        (One, "Страница обновляется раз в {n} секунду."),
        (Few, "Страница обновляется раз в {n} секунды."),
        (Other, "Страница обновляется раз в {n} секунд."),
    ],
    less_than_a_minute: "меньше минуты",
    unavailable: "недоступно",
    minutes: &[
        (One, "{n} минута"),
        (Few, "{n} минуты"),
        (Other, "{n} минут"),
    ],
    hours: &[(One, "{n} час"), (Few, "{n} часа"), (Other, "{n} часов")],
    days: &[(One, "{n} день"), (Few, "{n} дня"), (Other, "{n} дней")],
    and: " и ",
    and_before_digit: " и ",
};

const TR: Strings = Strings {
    rule: Rule::None,
    digits: Digits::Latin,
    title_queue: "Sıradasınız",
    title_prequeue: "Etkinlik birazdan başlıyor",
    title_reject: "Bu site şu anda çok yoğun",
    queue_intro: "Bu site şu anda çok yoğun. Sıradasınız ve sıranız geldiğinde otomatik olarak \
                  içeri alınacaksınız; lütfen bu sayfayı açık tutun.",
    position_label: "Sıradaki yeriniz:",
    wait_label: "Tahmini bekleme süresi:",
    wait_unknown: "Bekleme süresi henüz tahmin edilemiyor.",
    prequeue_intro: "Etkinlik henüz başlamadı. Başladığında otomatik olarak sıraya \
                     alınacaksınız; lütfen bu sayfayı açık tutun.",
    prequeue_label: "Başlamasına kalan süre:",
    prequeue_shuffle: "Etkinlik başladığında burada bekleyen herkesin sırası kurayla \
                       belirlenecek; bu yüzden erken gelmenize gerek yok.",
    reject_intro: "Bu site şu anda tam kapasiteyle çalışıyor.",
    retry: &[(Other, "Lütfen {n} saniye sonra tekrar deneyin.")],
    refresh: &[(Other, "Bu sayfa her {n} saniyede bir yenilenir.")],
    less_than_a_minute: "bir dakikadan az",
    unavailable: "bilinmiyor",
    minutes: &[(Other, "{n} dakika")],
    hours: &[(Other, "{n} saat")],
    days: &[(Other, "{n} gün")],
    and: " ",
    and_before_digit: " ",
};

const JA: Strings = Strings {
    rule: Rule::None,
    digits: Digits::Latin,
    title_queue: "順番待ち中です",
    title_prequeue: "まもなくイベントが始まります",
    title_reject: "ただいまアクセスが集中しています",
    queue_intro: "現在、アクセスが集中しています。順番が来ると自動的にサイトへご案内しますので、\
                  このページを開いたままお待ちください。",
    position_label: "あなたの順番：",
    wait_label: "予想待ち時間：",
    wait_unknown: "待ち時間はまだ予測できません。",
    prequeue_intro: "イベントはまだ始まっていません。開始時刻になると自動的に順番待ちの列へご案内\
                     しますので、このページを開いたままお待ちください。",
    prequeue_label: "開始まで：",
    prequeue_shuffle:
        "開始時に、ここでお待ちの皆さまの順番は抽選で決まります。早めにお越しいただく\
                       必要はありません。",
    reject_intro: "現在、サイトの受け入れ人数が上限に達しています。",
    retry: &[(Other, "{n}秒後にもう一度お試しください。")],
    refresh: &[(Other, "このページは{n}秒ごとに自動で更新されます。")],
    less_than_a_minute: "1分未満",
    unavailable: "不明",
    minutes: &[(Other, "{n}分")],
    hours: &[(Other, "{n}時間")],
    days: &[(Other, "{n}日")],
    and: "",
    and_before_digit: "",
};

const ZH: Strings = Strings {
    rule: Rule::None,
    digits: Digits::Latin,
    title_queue: "您正在排队",
    title_prequeue: "活动即将开始",
    title_reject: "网站繁忙",
    queue_intro: "当前网站访问量很大。您已在排队中，轮到您时将自动进入网站；请不要关闭此页面。",
    position_label: "您的排队位置：",
    wait_label: "预计等待时间：",
    wait_unknown: "暂时无法估计等待时间。",
    prequeue_intro: "活动尚未开始。活动开始时，您将自动进入排队队列；请不要关闭此页面。",
    prequeue_label: "距离开始还有：",
    prequeue_shuffle: "活动开始时，所有在此等候的访客将随机抽取排队顺序，因此无需提前到达。",
    reject_intro: "网站当前已达到访问上限。",
    retry: &[(Other, "请在{n}秒后重试。")],
    refresh: &[(Other, "此页面每{n}秒自动刷新一次。")],
    less_than_a_minute: "不到1分钟",
    unavailable: "暂无",
    minutes: &[(Other, "{n}分钟")],
    hours: &[(Other, "{n}小时")],
    days: &[(Other, "{n}天")],
    and: "",
    and_before_digit: "",
};

const KO: Strings = Strings {
    rule: Rule::None,
    digits: Digits::Latin,
    title_queue: "대기 중입니다",
    title_prequeue: "곧 이벤트가 시작됩니다",
    title_reject: "접속자가 많습니다",
    queue_intro: "현재 접속자가 많습니다. 대기열에 등록되었으며 순서가 되면 자동으로 입장합니다. \
                  이 페이지를 닫지 마세요.",
    position_label: "내 대기 순서:",
    wait_label: "예상 대기 시간:",
    wait_unknown: "아직 대기 시간을 예측할 수 없습니다.",
    prequeue_intro: "이벤트가 아직 시작되지 않았습니다. 시작되면 자동으로 대기열에 등록됩니다. \
                     이 페이지를 닫지 마세요.",
    prequeue_label: "시작까지 남은 시간:",
    prequeue_shuffle: "이벤트가 시작되면 여기서 기다리는 모든 분의 순서가 추첨으로 정해지므로 \
                       미리 오실 필요가 없습니다.",
    reject_intro: "현재 사이트 수용 인원이 가득 찼습니다.",
    retry: &[(Other, "{n}초 후에 다시 시도해 주세요.")],
    refresh: &[(Other, "이 페이지는 {n}초마다 새로 고침됩니다.")],
    less_than_a_minute: "1분 미만",
    unavailable: "알 수 없음",
    minutes: &[(Other, "{n}분")],
    hours: &[(Other, "{n}시간")],
    days: &[(Other, "{n}일")],
    and: " ",
    and_before_digit: " ",
};

const AR: Strings = Strings {
    rule: Rule::Arabic,
    digits: Digits::ArabicIndic,
    title_queue: "أنت في قائمة الانتظار",
    title_prequeue: "سيبدأ الحدث قريبًا",
    title_reject: "الموقع مزدحم",
    queue_intro: "يشهد هذا الموقع ضغطًا كبيرًا الآن. أنت في قائمة الانتظار وستدخل تلقائيًا عند \
                  حلول دورك؛ يُرجى إبقاء هذه الصفحة مفتوحة.",
    position_label: "ترتيبك في قائمة الانتظار:",
    wait_label: "مدة الانتظار المتوقعة:",
    wait_unknown: "لا يمكن تقدير مدة الانتظار بعد.",
    prequeue_intro: "لم يبدأ الحدث بعد. عند بدئه ستنضم إلى قائمة الانتظار تلقائيًا؛ يُرجى \
                     إبقاء هذه الصفحة مفتوحة.",
    prequeue_label: "الوقت المتبقي حتى البدء:",
    prequeue_shuffle: "عند بدء الحدث سيُحدَّد ترتيب جميع المنتظرين هنا بالقرعة، لذا لا داعي \
                       للحضور مبكرًا.",
    reject_intro: "وصل هذا الموقع إلى أقصى طاقته الآن.",
    retry: &[
        (One, "يُرجى المحاولة مرة أخرى بعد ثانية واحدة."),
        (Two, "يُرجى المحاولة مرة أخرى بعد ثانيتين."),
        (Few, "يُرجى المحاولة مرة أخرى بعد {n} ثوانٍ."),
        (Other, "يُرجى المحاولة مرة أخرى بعد {n} ثانية."),
    ],
    refresh: &[
        (One, "يتم تحديث هذه الصفحة كل ثانية."),
        (Two, "يتم تحديث هذه الصفحة كل ثانيتين."),
        (Few, "يتم تحديث هذه الصفحة كل {n} ثوانٍ."),
        (Other, "يتم تحديث هذه الصفحة كل {n} ثانية."),
    ],
    less_than_a_minute: "أقل من دقيقة",
    unavailable: "غير متاح",
    minutes: &[
        (One, "دقيقة واحدة"),
        (Two, "دقيقتان"),
        (Few, "{n} دقائق"),
        (Other, "{n} دقيقة"),
    ],
    hours: &[
        (One, "ساعة واحدة"),
        (Two, "ساعتان"),
        (Few, "{n} ساعات"),
        (Other, "{n} ساعة"),
    ],
    days: &[
        (One, "يوم واحد"),
        (Two, "يومان"),
        (Few, "{n} أيام"),
        (Many, "{n} يومًا"),
        (Other, "{n} يوم"),
    ],
    and: " و",
    and_before_digit: " و",
};

const HE: Strings = Strings {
    rule: Rule::Hebrew,
    digits: Digits::Latin,
    title_queue: "אתם בתור",
    title_prequeue: "האירוע יתחיל בקרוב",
    title_reject: "האתר עמוס",
    queue_intro: "האתר עמוס מאוד כרגע. אתם בתור ותיכנסו אוטומטית כשיגיע תורכם; נא להשאיר את \
                  הדף הזה פתוח.",
    position_label: "המקום שלכם בתור:",
    wait_label: "זמן המתנה משוער:",
    wait_unknown: "עדיין אי אפשר להעריך את זמן ההמתנה.",
    prequeue_intro: "האירוע עדיין לא התחיל. כשיתחיל, תצטרפו לתור אוטומטית; נא להשאיר את הדף \
                     הזה פתוח.",
    prequeue_label: "הזמן שנותר עד ההתחלה:",
    prequeue_shuffle: "בתחילת האירוע סדר כל הממתינים כאן ייקבע בהגרלה, כך שאין צורך להגיע \
                       מוקדם.",
    reject_intro: "האתר הגיע כרגע לקיבולת המרבית.",
    retry: &[
        (One, "נא לנסות שוב בעוד שנייה אחת."),
        (Two, "נא לנסות שוב בעוד שתי שניות."),
        (Other, "נא לנסות שוב בעוד {n} שניות."),
    ],
    refresh: &[
        (One, "הדף מתרענן בכל שנייה."),
        (Two, "הדף מתרענן כל שתי שניות."),
        (Other, "הדף מתרענן כל {n} שניות."),
    ],
    less_than_a_minute: "פחות מדקה",
    unavailable: "לא זמין",
    minutes: &[(One, "דקה אחת"), (Two, "שתי דקות"), (Other, "{n} דקות")],
    hours: &[(One, "שעה אחת"), (Two, "שעתיים"), (Other, "{n} שעות")],
    days: &[(One, "יום אחד"), (Two, "יומיים"), (Other, "{n} ימים")],
    and: " ו",
    and_before_digit: " ו־",
};

const FA: Strings = Strings {
    rule: Rule::None,
    digits: Digits::Persian,
    title_queue: "شما در صف هستید",
    title_prequeue: "رویداد به\u{200c}زودی آغاز می\u{200c}شود",
    title_reject: "سایت شلوغ است",
    queue_intro: "این سایت در حال حاضر بسیار شلوغ است. شما در صف هستید و وقتی نوبتتان برسد \
                  به\u{200c}طور خودکار وارد می\u{200c}شوید؛ لطفاً این صفحه را باز نگه دارید.",
    position_label: "جایگاه شما در صف:",
    wait_label: "زمان انتظار تخمینی:",
    wait_unknown: "هنوز نمی\u{200c}توان زمان انتظار را تخمین زد.",
    prequeue_intro: "رویداد هنوز آغاز نشده است. با آغاز آن، به\u{200c}طور خودکار در صف قرار \
                     می\u{200c}گیرید؛ لطفاً این صفحه را باز نگه دارید.",
    prequeue_label: "زمان باقی\u{200c}مانده تا آغاز:",
    prequeue_shuffle: "هنگام آغاز رویداد، ترتیب همهٔ کسانی که اینجا منتظرند به\u{200c}صورت \
                       تصادفی تعیین می\u{200c}شود؛ پس لازم نیست زودتر بیایید.",
    reject_intro: "ظرفیت این سایت در حال حاضر تکمیل است.",
    retry: &[(Other, "لطفاً {n} ثانیهٔ دیگر دوباره تلاش کنید.")],
    refresh: &[(
        Other,
        "این صفحه هر {n} ثانیه یک\u{200c}بار به\u{200c}روز می\u{200c}شود.",
    )],
    less_than_a_minute: "کمتر از یک دقیقه",
    unavailable: "نامشخص",
    minutes: &[(Other, "{n} دقیقه")],
    hours: &[(Other, "{n} ساعت")],
    days: &[(Other, "{n} روز")],
    and: " و ",
    and_before_digit: " و ",
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_counted_phrase_has_an_other_form_and_a_number_where_needed() {
        for l in Language::ALL {
            let s = strings(l);
            for forms in [s.retry, s.refresh, s.minutes, s.hours, s.days] {
                assert!(
                    forms.iter().any(|(p, _)| *p == Other),
                    "{}: a phrase without an `other` form",
                    l.tag()
                );
                for (p, text) in forms {
                    // Only singular and dual forms may spell the number out.
                    if !matches!(p, One | Two) {
                        assert!(text.contains("{n}"), "{}: `{text}` lacks {{n}}", l.tag());
                    }
                    assert!(!text.contains("{{"), "{}: `{text}` holds a tag", l.tag());
                }
            }
        }
    }
}
